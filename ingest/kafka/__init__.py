"""Everything that talks to a broker: Spark source options, admin queries, the
producer, the embedded broker. Imports `ingest.spec` and below."""
