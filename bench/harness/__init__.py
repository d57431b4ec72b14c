"""What the studies share: the bench data (datagen), the legs over one topic (legs),
CPU and memory metering (meter), and the ratios, tables and plots (report)."""
