"""Reading the three witnesses (Kafka, the checkpoint, the Delta log): `status`
and `verify`. Imports `ingest.stream` and below."""
