"""issue 54.6: messages that read like trouble and are not the user's business stay out of stderr."""

import re

from ingest.platform.builder import LOG_CONFIG

# as org.apache.spark.rdd.RDD logs it when Delta's MERGE releases the source it checkpointed
LINEAGE = ("RDD 1042 was locally checkpointed, its lineage has been truncated and cannot be recomputed "
           "after unpersisting")


def test_the_session_filters_the_lineage_warning_and_only_it(spark):
    # the session's JVM loaded the filter (a broken properties file would leave the root logger's)
    config = spark._jvm.org.apache.logging.log4j.LogManager.getContext(False).getConfiguration()
    rdd = config.getLoggerConfig("org.apache.spark.rdd.RDD")
    assert rdd.getName() == "org.apache.spark.rdd.RDD", "no logger configured for the RDD warnings"
    assert rdd.getFilter() is not None and "lineage" in rdd.getFilter().toString()
    # its regex takes the message Spark logs, and not the logger's other warnings
    pattern = re.search(r"^logger\.rdd\.filter\.lineage\.regex = (.*)$", LOG_CONFIG.read_text(), re.M).group(1)
    assert re.fullmatch(pattern, LINEAGE)
    assert not re.fullmatch(pattern, "Failed to unpersist RDD 7")
