"""One micro-batch, step by step: decode, transform, uid, dead letters, MERGE
under the idempotent txn id with the offsets in the commit. Imports
`ingest.kafka` and below."""
