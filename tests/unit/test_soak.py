"""`make soak`'s figures (bench/soak/analysis.py): the batch lines it reads, the JVM's reports it
parses, a phase's thirds and the exact count. The texts are what `ingest run` and JDK 17's jcmd print."""

import pytest

from bench.soak.analysis import (
    Batch,
    Resident,
    Sample,
    exact_figures,
    jvm_figures,
    parse_batch_line,
    parse_heap_info,
    parse_histogram,
    parse_native_memory,
    phase_figures,
    run_sample,
    thirds,
)
from ingest.batch.merge.target import MergeResult
from ingest.batch.processor import BatchReport, BatchSummary


def batch_line(batch_id: int, read: int, seconds: float, dead: int = 0) -> str:
    summary = BatchSummary(read=read, unique=read - dead, by_stage={"decode": dead},
                           start_offsets={"soak": {0: 0, 1: 0}}, end_offsets={"soak": {0: read // 2, 1: read}},
                           bounds={})
    return BatchReport("soak", batch_id, summary, MergeResult(read - dead, 0), seconds,
                       dead_letters_at="/data/dead_letter/soak").line()


def test_a_batch_line_of_ingest_run_gives_its_id_records_and_seconds():
    assert parse_batch_line(batch_line(41, 1500, 12.34, dead=2) + "\n", at=7.0) == Batch(7.0, 41, 1500, 12.3)
    assert parse_batch_line(batch_line(0, 0, 0.4), at=1.0) == Batch(1.0, 0, 0, 0.4)


@pytest.mark.parametrize("line", [
    "soak: done after 2 batch(es)",
    "progress: soak [#####....] 20.0% 2,293/11,473 records, 85 rec/s, 108s left",
    "note: soak: compacted the target (batch 50): 12 files into 1, 3.2s",
    "21:37:56 WARN ProcessingTimeExecutor: Current batch is falling behind. The trigger interval is 5000 ms",
])
def test_other_lines_are_no_batch(line):
    assert parse_batch_line(line, at=0.0) is None


def test_each_third_is_the_median_of_its_span_of_time():
    points = [(0, 100), (10, 100), (29, 900),  # the warm-up
              (30, 200), (40, 210), (50, 5000),  # one outlier: the median keeps to the trend
              (60, 300), (75, 300), (90, 310)]  # the end belongs to the last third
    assert thirds(points, 0, 90) == [100, 210, 300]
    assert thirds([(5, 1.0), (80, 2.0)], 0, 90) == [1.0, None, 2.0]
    assert thirds([(95, 1.0)], 0, 90) == [None, None, None]  # outside the phase


def samples(mb_by_third: tuple[float, float, float], python_mb: float = 150) -> list[Sample]:
    return [Sample(at, mb_by_third[min(at // 60, 2)], python_mb, mb_by_third[min(at // 60, 2)] - python_mb)
            for at in range(0, 181, 10)]


def batches(seconds_by_third: tuple[float, float, float]) -> list[Batch]:
    return [Batch(at, at // 5, 1500, seconds_by_third[min(at // 60, 2)]) for at in range(0, 181, 5)]


def test_memory_that_keeps_growing_fails_the_goal_and_memory_that_levels_off_meets_it():
    growing = phase_figures(samples((800, 1400, 2100)), batches((3, 3, 3)), 0, 180)
    assert growing["rss_mb_thirds"] == [800, 1400, 2100]
    assert growing["rss_ratio"] == pytest.approx(1.5)
    assert not growing["rss_ok"]
    assert growing["batch_ok"] and growing["batch_ratio"] == 1.0
    level = phase_figures(samples((800, 1900, 2000)), batches((3, 3, 3)), 0, 180)
    assert level["rss_ratio"] == round(2000 / 1900, 3)
    assert level["rss_ok"]
    assert level["python_mb_thirds"] == [150, 150, 150]
    assert level["batches"] == 37 and level["records_read"] == 37 * 1500 and level["samples"] == 19


def test_batches_that_creep_fail_the_goal():
    creeping = phase_figures(samples((1000, 1000, 1000)), batches((2.0, 2.5, 3.1)), 0, 180)
    assert creeping["batch_s_thirds"] == [2.0, 2.5, 3.1]
    assert creeping["batch_ratio"] == pytest.approx(1.24)
    assert not creeping["batch_ok"]
    assert creeping["rss_ok"]


def test_a_phase_without_batches_meets_no_goal():
    figures = phase_figures(samples((1000, 1000, 1000)), [], 0, 180)
    assert figures["batch_ratio"] is None and not figures["batch_ok"]


G1_HEAP_INFO = """29271:
 garbage-first heap   total 116736K, used 39637K [0x0000000080000000, 0x0000000100000000)
  region size 1024K, 3 young (3072K), 2 survivors (2048K)
 Metaspace       used 35845K, committed 36288K, reserved 1114112K
  class space    used 4348K, committed 4544K, reserved 1048576K
"""

PARALLEL_HEAP_INFO = """4242:
 PSYoungGen      total 611840K, used 104934K [0x00000007d5580000, 0x0000000800000000, 0x0000000800000000)
  eden space 524800K, 20% used [0x00000007d5580000,0x00000007dbbd9b98,0x00000007f5600000)
 ParOldGen       total 1398272K, used 20480K [0x0000000780000000, 0x00000007d5580000, 0x00000007d5580000)
  object space 1398272K, 1% used [0x0000000780000000,0x00000007d5580000)
 Metaspace       used 98765K, committed 102400K, reserved 1179648K
"""


def test_heap_info_of_either_collector():
    assert parse_heap_info(G1_HEAP_INFO) == {"heap_committed_mb": 116736 / 1024, "heap_used_mb": 39637 / 1024,
                                             "metaspace_used_mb": 35845 / 1024,
                                             "metaspace_committed_mb": 36288 / 1024}
    parallel = parse_heap_info(PARALLEL_HEAP_INFO)
    assert parallel["heap_committed_mb"] == (611840 + 1398272) / 1024
    assert parallel["heap_used_mb"] == (104934 + 20480) / 1024
    assert parse_heap_info("") == {}


NATIVE_MEMORY = """29271:

Native Memory Tracking:

(Omitting categories weighting less than 1KB)

Total: reserved=3670174KB, committed=256174KB
       malloc: 36682KB #260607
       mmap:   reserved=3633492KB, committed=219492KB

-                 Java Heap (reserved=2097152KB, committed=116736KB)
                            (mmap: reserved=2097152KB, committed=116736KB)

-                     Class (reserved=1049254KB, committed=5478KB)
                            (classes #7224)
                            (    reserved=65536KB, committed=33856KB)

-                    Thread (reserved=47372KB, committed=3964KB)
                            (thread #47)
                            (stack: reserved=47240KB, committed=3832KB)

-                     Other (reserved=10240KB, committed=10240KB)
                            (malloc=10240KB #87)
"""


def test_native_memory_by_category_and_the_threads_without_the_detail_lines():
    assert parse_native_memory(NATIVE_MEMORY) == {
        "Total": 256174 / 1024, "Java Heap": 116736 / 1024, "Class": 5478 / 1024, "Thread": 3964 / 1024,
        "threads": 47, "Other": 10.0}


HISTOGRAM = """29271:
 num     #instances         #bytes  class name (module)
-------------------------------------------------------
   1:        237348       50243584  [B (java.base@17.0.15)
   2:        183081        5858592  java.util.concurrent.ConcurrentHashMap$Node (java.base@17.0.15)
   3:          9000       62914560  org.apache.spark.sql.execution.ui.SQLExecutionUIData
Total       1234567      150000000
"""


def test_the_live_heap_total_and_its_largest_classes_first():
    live = parse_histogram(HISTOGRAM, top=2)
    assert live["total_mb"] == round(150000000 / 2**20, 1)
    assert [row["class"] for row in live["top"]] == ["org.apache.spark.sql.execution.ui.SQLExecutionUIData", "[B"]
    assert live["top"][1] == {"class": "[B", "instances": 237348, "mb": 47.9}


def test_exact_only_when_every_acknowledged_uid_landed_once_and_nothing_else():
    assert exact_figures({"a", "b", "c"}, ["c", "a", "b"])["exact"]
    missing = exact_figures({"a", "b", "c"}, ["a", "b"])
    assert (missing["exact"], missing["missing"], missing["missing_examples"]) == (False, 1, ["c"])
    twice = exact_figures({"a", "b"}, ["a", "b", "b"])
    assert (twice["exact"], twice["duplicated"], twice["rows"]) == (False, 1, 3)
    extra = exact_figures({"a"}, ["a", "z"])
    assert (extra["exact"], extra["extra"]) == (False, 1)


def test_the_jvm_by_third_shows_a_heap_that_grows_beside_a_flat_rest():
    reports = [{"at": at, "heap_committed_mb": 400 + 10 * at, "heap_used_mb": 200.0, "nmt_Total": 1000 + 10 * at,
                "nmt_Java Heap": 400 + 10 * at, "threads": 280} for at in range(0, 91, 15)]
    figures = jvm_figures(reports, 0, 90)
    assert figures["heap_committed_mb"] == [475, 775, 1150]  # medians of 400/550, 700/850, 1000/1150/1300
    assert figures["beside_heap_mb"] == [600, 600, 600]
    assert figures["threads"] == [280, 280, 280]
    assert figures["metaspace_used_mb"] == [None, None, None]  # not reported


def test_a_process_the_jvm_spawns_is_not_a_second_jvm():
    """What a 1g soak sampled once: 2,985 MB, a child of the JVM reading as the JVM's 1,414 MB again."""
    python, jvm, spawned = Resident(10, 1, "python3.11", 158), Resident(11, 10, "java", 1414), \
        Resident(12, 11, "java", 1414)
    assert run_sample([python, jvm, spawned], root=10, at=5.0) == Sample(5.0, 1572, 158, 1414)
    helper = Resident(13, 10, "bash", 4)  # started by Python itself: its own memory
    assert run_sample([python, jvm, helper], root=10, at=5.0) == Sample(5.0, 1576, 158, 1414)
    assert run_sample([jvm], root=10, at=5.0) is None  # the run is gone


# jstat -gc of JDK 17: a header row and a row of figures, right-aligned in columns
JSTAT_COLUMNS = "S0C S1C S0U S1U EC EU OC OU MC MU CCSC CCSU YGC YGCT FGC FGCT CGC CGCT GCT"
JSTAT_G1 = "".join(f"{c:>12}" for c in JSTAT_COLUMNS.split()) + "\n" + "".join(f"{v:>12}" for v in (
    "0.0 17408.0 0.0 17408.0 278528.0 92160.0 246784.0 213643.5 202688.0 199608.5 26880.0 25442.1 "
    "60 2.492 0 0.000 36 0.492 2.984").split()) + "\n"
JSTAT_PARALLEL = JSTAT_G1.replace(f"{36:>12}{0.492:>12}", f"{'-':>12}{'-':>12}")


def test_the_collections_jstat_counts_with_or_without_concurrent_cycles():
    from bench.soak.memory import parse_jstat

    assert parse_jstat(JSTAT_G1) == {"young_gcs": 60, "full_gcs": 0, "concurrent_gcs": 36, "gc_pause_s": 2.984}
    assert parse_jstat(JSTAT_PARALLEL) == {"young_gcs": 60, "full_gcs": 0, "gc_pause_s": 2.984}
    assert parse_jstat("") == {}


def test_the_collections_of_a_span_are_the_counters_difference():
    from bench.soak.analysis import gc_figures

    reports = [{"at": 60.0, "young_gcs": 10, "concurrent_gcs": 2, "full_gcs": 0, "gc_pause_s": 1.0},
               {"at": 360.0, "young_gcs": 70, "concurrent_gcs": 8, "full_gcs": 0, "gc_pause_s": 7.0},
               {"at": 900.0, "young_gcs": 5, "gc_pause_s": 0.1}]  # after the span: left out
    assert gc_figures(reports, 0.0, 600.0) == {"minutes": 5.0, "young_gcs": 60, "concurrent_gcs": 6,
                                               "full_gcs": 0, "gc_pause_s": 6.0, "pause_share": 0.02}
    assert gc_figures(reports[:1], 0.0, 600.0) == {}
