"""What the studies share: the suite's run given its parts (runner), the bench data
(datagen), the legs over one topic (legs), CPU and memory metering (meter), and the
ratios, tables and plots (report)."""
