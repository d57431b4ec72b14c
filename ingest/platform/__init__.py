"""Where it runs: the Spark session, the JVM jars, Databricks. Imports only `ingest.errors`."""
