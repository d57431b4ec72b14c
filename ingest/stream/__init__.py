"""A running query: start, resume after a lost checkpoint, lease, progress.
Imports `ingest.batch` and below."""
