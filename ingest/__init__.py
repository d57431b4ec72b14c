"""ingest: exactly-once ingestion from Kafka into Delta Lake, declared in YAML."""

__version__ = "0.1.0"
