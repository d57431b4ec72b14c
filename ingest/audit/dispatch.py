"""The audit that fits a pipeline, for `ingest verify` and `ingest.verify` alike (the
contract says the API gives the command's report): the change audit for `cdc`, the
record audit otherwise, and for a table per topic, the fitting one per table."""

from __future__ import annotations

from ingest.audit.per_table import PerTableReport, verify_per_table, verify_table
from ingest.audit.verify import VerifyReport
from ingest.audit.verify_changes import ChangesReport
from ingest.spec.model import Pipeline
from ingest.spec.template import is_per_topic

AnyReport = VerifyReport | ChangesReport | PerTableReport


def verify_pipeline(spark, pipeline: Pipeline) -> AnyReport:
    if is_per_topic(pipeline):
        return verify_per_table(spark, pipeline)
    return verify_table(spark, pipeline)

