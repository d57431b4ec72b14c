"""What a session ingest builds gives its driver's JVM: the log config and the heap options that
let the heap follow the live set, joined with (never replaced by) a user's own JVM options."""

import pytest

from ingest.platform import builder
from ingest.platform.builder import HEAP_FOLLOWS_LIVE_SET, JAVA_OPTIONS, LOG_CONFIG, configure_builder
from ingest.platform.session import session_settings

LOG_OPTION = f"-Dlog4j2.configurationFile={LOG_CONFIG}"


@pytest.fixture(autouse=True)
def no_jars(monkeypatch):
    monkeypatch.setenv("INGEST_JARS", "none")  # no Maven resolution for a settings check


def options_of(settings: dict[str, str]) -> list[str]:
    return settings[JAVA_OPTIONS].split()


def test_a_local_session_gets_the_log_config_and_a_heap_that_gives_memory_back():
    settings = session_settings("ingest-run", None, None, local=True)
    assert options_of(settings) == [LOG_OPTION, *HEAP_FOLLOWS_LIVE_SET]
    assert "-XX:+ExplicitGCInvokesConcurrent" in HEAP_FOLLOWS_LIVE_SET
    assert settings["spark.cleaner.periodicGC.interval"] == "2min"
    assert settings["spark.driver.memory"] == "2g"


def test_a_users_jvm_options_are_joined_after_ingests_so_theirs_win():
    mine = "-XX:MaxHeapFreeRatio=50 -Dmine=1"
    settings = session_settings("ingest-run", {JAVA_OPTIONS: mine, "spark.cleaner.periodicGC.interval": "10min"},
                                {JAVA_OPTIONS: "-Dfrom.env.yaml=1"}, local=True)
    options = options_of(settings)
    # the JVM takes the last of an option given twice: the user's 50 over ingest's 30
    assert options == [LOG_OPTION, *HEAP_FOLLOWS_LIVE_SET, "-Dfrom.env.yaml=1", "-XX:MaxHeapFreeRatio=50", "-Dmine=1"]
    assert settings["spark.cleaner.periodicGC.interval"] == "10min"


def test_under_spark_submit_or_databricks_only_the_users_options_stand():
    settings = session_settings("ingest-run", {JAVA_OPTIONS: "-Dmine=1"}, {JAVA_OPTIONS: "-Dignored=1"}, local=False)
    assert options_of(settings) == ["-Dmine=1"]
    assert "spark.cleaner.periodicGC.interval" not in settings


def test_a_connect_server_started_here_joins_them_too():
    class Recorded:
        def __init__(self):
            self.settings: dict[str, str] = {}

        def config(self, key, value):
            self.settings[key] = value
            return self

    recorded = configure_builder(Recorded(), builder.merged(builder.LOCAL_DEFAULTS, {JAVA_OPTIONS: "-Dmine=1"}),
                                 mode="none")
    assert options_of(recorded.settings) == [LOG_OPTION, *HEAP_FOLLOWS_LIVE_SET, "-Dmine=1"]


def test_an_empty_layer_keeps_what_came_before():
    assert builder.merged({JAVA_OPTIONS: "-Da=1"}, None, {}, {"x": "1"}) == {JAVA_OPTIONS: "-Da=1", "x": "1"}


def test_a_local_session_schedules_fair_so_a_batchs_tables_share_the_cores():
    """The router puts each table's jobs in a pool of its own (docs/many-topics.md); Spark reads
    the mode when the application starts, so a session started here sets it, and a user's wins."""
    assert session_settings("ingest-run", None, None, local=True)["spark.scheduler.mode"] == "FAIR"
    assert session_settings("ingest-run", {"spark.scheduler.mode": "FIFO"}, None,
                            local=True)["spark.scheduler.mode"] == "FIFO"
    assert "spark.scheduler.mode" not in session_settings("ingest-run", None, None, local=False)
