"""What differs on Databricks: secrets come from a secret scope through dbutils.

Everything else is the same code path: the runtime's session is used as it is
(`session.existing_session`), no jars are added (`session.jar_mode`), and
catalog names in `target.table` are plain Spark table names. See docs/databricks.md.
"""

from __future__ import annotations


def read_secret(scope: str, key: str) -> str | None:
    """`dbutils.secrets.get(scope, key)`. Databricks redacts the value in
    notebook output; ingest masks it in its own (it is marked secret)."""
    return _dbutils().secrets.get(scope=scope, key=key)


def _dbutils():
    try:
        from pyspark.dbutils import (
            DBUtils,  # classic compute: wants the runtime's session
        )
    except ImportError:
        from databricks.sdk.runtime import dbutils  # where pyspark.dbutils is absent

        return dbutils
    from ingest.platform.session import existing_session

    return DBUtils(existing_session())
