"""YAML and conf in, a frozen `Pipeline` out, every problem with file:line:path.

Imports `ingest.errors` and `ingest.platform` (secrets on Databricks) only.
"""
