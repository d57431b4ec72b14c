"""Raw Kafka records to payload columns, one module per wire format.

`decode.decode` is the entry the batch and `verify` call: JSON, string and bytes
there, Avro and Protobuf through `schemas.SchemaDecoder` (the reader schema from
`registry`; each record read by `avro.Reader` or `protobuf.Reader` from the
Confluent frame that `wire` reads), Debezium's change envelope in `cdc` with
Kafka Connect's logical types in `connect_types`. Imports only `batch.staged`
inside `batch/`. Nothing is imported here: `plan` and `validate` load single
modules of this package without starting Spark.
"""
