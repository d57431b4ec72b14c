"""The class archive the suite's child JVMs map (tests/child_jvms.py): one per installed jar set."""

import os

from tests.child_jvms import archive_key, prune_archives, starts_children


def test_a_reinstalled_jar_set_gets_an_archive_of_its_own(tmp_path):
    """A JVM refuses an archive whose jars differ in path, size or time from the dumping JVM's:
    a fresh clone's venv (same jar names, new files) must not reuse the last clone's."""
    first, second = tmp_path / "a" / "jars", tmp_path / "b" / "jars"
    for jars in (first, second):
        jars.mkdir(parents=True)
        (jars / "spark-core.jar").write_bytes(b"classes")
    key = archive_key("java 17", first)
    assert archive_key("java 17", first) == key
    assert archive_key("java 17", second) != key  # another path
    os.utime(first / "spark-core.jar", ns=(1, 1))
    assert archive_key("java 17", first) != key  # the same path installed again
    assert archive_key("java 21", first) != archive_key("java 17", first)


def test_only_the_last_used_archives_are_kept(tmp_path):
    for n in range(5):
        archive = tmp_path / f"driver-{n}.jsa"
        archive.write_bytes(b"x")
        os.utime(archive, (n * 100, n * 100))
    (tmp_path / "driver-9.jsa.123.partial").write_bytes(b"a dump under way")
    prune_archives(tmp_path, keep=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "driver-2.jsa", "driver-3.jsa", "driver-4.jsa", "driver-9.jsa.123.partial"]


def test_the_archive_is_dumped_only_for_runs_that_start_children():
    assert starts_children(["tests"]) and starts_children([])
    assert starts_children(["tests/unit", "tests/integration/test_run.py::test_replay"])
    assert not starts_children(["tests/unit", "tests/spark", "-q"])
    assert not starts_children(["tests/spark/batch/test_processor.py::test_one_pass_counts_offsets_and_uids"])
