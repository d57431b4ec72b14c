"""Parquet files read by Spark since a mark: how many target files a MERGE scanned.

Delta's MERGE `operationMetrics` (4.4) report files added and removed, not
files scanned; Spark's SQL metrics ("number of files read" of each scan) do,
and they count after Delta's data skipping. Needs the driver JVM (not on
Databricks serverless).
"""

from __future__ import annotations

FILES_READ = "number of files read"


def _store(spark):
    return spark._jsparkSession.sharedState().statusStore()


def last_execution_id(spark) -> int:
    executions = _store(spark).executionsList()
    return max((executions.apply(i).executionId() for i in range(executions.size())), default=-1)


def files_read_since(spark, mark: int) -> int:
    """Files read by every SQL execution that started after `mark`."""
    store = _store(spark)
    executions = store.executionsList()
    total = 0
    for i in range(executions.size()):
        execution = executions.apply(i)
        if execution.executionId() > mark:
            total += _files_read(store, execution)
    return total


def _files_read(store, execution) -> int:
    values = execution.metricValues()
    if values is None:
        return 0
    nodes = store.planGraph(execution.executionId()).allNodes()
    total = 0
    for i in range(nodes.size()):
        metrics = nodes.apply(i).metrics()
        for j in range(metrics.size()):
            metric = metrics.apply(j)
            if metric.name() == FILES_READ and values.contains(metric.accumulatorId()):
                total += int(values.apply(metric.accumulatorId()).replace(",", ""))
    return total
