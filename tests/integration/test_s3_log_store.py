"""Two writers of one S3 table, and the lease on S3, against moto's S3 server (a stand-in
speaking S3's protocol on loopback) through hadoop-aws's S3A client and Delta.

Without a condition, two S3A creates of one absent file that overlap both succeed and the
first one's bytes are gone: what two drivers on Delta's single-driver log store do to a
commit. With S3's put-if-absent the second fails, and ingest's log store turns that into
Delta's retry: no commit is lost.
"""

from __future__ import annotations

import json
import time

import pytest

from ingest.stream.lease import LEASE_FILE, STALE_AFTER_S, AlreadyRunning
from ingest.stream.store_lease import StoreLease, conditional_create
from tests.integration.processes import wait_for

IF_ABSENT = "fs.option.create.conditional.overwrite"
# a bucket whose S3A settings turn conditional create off: a store without put-if-absent
PLAIN_BUCKET = "ingest-tests-plain"


@pytest.fixture(scope="module")
def plain_bucket(s3, spark):
    s3.create_bucket(PLAIN_BUCKET)
    s3.use_in(spark, PLAIN_BUCKET)
    spark._jsc.hadoopConfiguration().set(f"fs.s3a.bucket.{PLAIN_BUCKET}.create.conditional.enabled", "false")
    return PLAIN_BUCKET


def jpath(spark, location):
    path = spark._jvm.org.apache.hadoop.fs.Path(location)
    return path, path.getFileSystem(spark._jsc.hadoopConfiguration())


def open_create(fs, path, conditional):
    builder = fs.createFile(path).overwrite(False)
    if conditional:
        builder = builder.must(IF_ABSENT, True)
    return builder.build()


def text(spark, fs, path):
    return spark._jvm.ingest.delta.ConditionalFiles.read(fs, path)[0]


def overlapping_creates(spark, location, conditional):
    """Two creates of one absent file, as two drivers committing one version: both open
    (both find it absent), then both close. What each close did, and the file's text."""
    path, fs = jpath(spark, location)
    first, second = open_create(fs, path, conditional), open_create(fs, path, conditional)
    first.write(bytearray(b"first writer\n"))
    second.write(bytearray(b"second writer\n"))
    outcomes = []
    for stream in (first, second):
        try:
            stream.close()
            outcomes.append("closed")
        except Exception as error:  # py4j's error: the Java exception's text follows its first line
            outcomes.append("failed: " + " ".join(str(error).splitlines()[1:3]))
    return outcomes, text(spark, fs, path)


def test_without_a_condition_two_creates_of_one_version_both_succeed_and_one_is_lost(spark, s3_root):
    outcomes, there = overlapping_creates(spark, f"{s3_root}/_delta_log/00000000000000000001.json", False)
    assert outcomes == ["closed", "closed"]
    assert there == "second writer\n"  # the first writer's commit is silently gone


def test_with_put_if_absent_the_second_create_of_one_version_fails(spark, s3_root):
    outcomes, there = overlapping_creates(spark, f"{s3_root}/_delta_log/00000000000000000001.json", True)
    assert outcomes[0] == "closed" and outcomes[1].startswith("failed")
    assert "RemoteFileChangedException" in outcomes[1] and "412" in outcomes[1]
    assert there == "first writer\n"


def log_store(spark, name="ingest.delta.S3ConditionalLogStore"):
    java_class = spark._jvm
    for part in name.split("."):
        java_class = getattr(java_class, part)
    return java_class(spark._jsc.hadoopConfiguration())


def java_lines(spark, *lines):
    listed = spark._jvm.java.util.ArrayList()
    for line in lines:
        listed.add(line)
    return listed.iterator()


class CommitMeetingAnother:
    """A commit's lines, as Delta hands them to the log store (a java.util.Iterator); while the
    store writes them, another driver creates the same version, as a second driver can
    between the store's check that the file is absent and the end of its write."""

    def __init__(self, fs, path, lines):
        self.fs, self.path, self.lines, self.met = fs, path, list(lines), False

    def hasNext(self):
        return bool(self.lines)

    def next(self):
        if not self.met:
            self.met = True
            other = self.fs.createFile(self.path).overwrite(False).build()
            other.write(bytearray(b'{"commitInfo":{"by":"the other driver"}}\n'))
            other.close()
        return self.lines.pop(0)

    class Java:
        implements = ["java.util.Iterator"]


@pytest.mark.parametrize("store, kept", [
    ("io.delta.storage.S3SingleDriverLogStore", "this driver's"),  # OSS Delta's default for S3
    ("ingest.delta.S3ConditionalLogStore", "the other driver's"),
])
def test_a_version_another_driver_commits_during_the_write(spark, s3_root, store, kept):
    """The single-driver store overwrites the other driver's commit (lost) and reports success;
    ingest's store keeps it and tells Delta the version is taken, so Delta retries at the next."""
    from pyspark.java_gateway import ensure_callback_server_started

    ensure_callback_server_started(spark.sparkContext._gateway)
    path, fs = jpath(spark, f"{s3_root}/_delta_log/00000000000000000001.json")
    fs.mkdirs(path.getParent())
    lines = CommitMeetingAnother(fs, path, ['{"commitInfo":{"by":"this driver"}}'])
    try:
        log_store(spark, store).write(path, lines, False, spark._jsc.hadoopConfiguration())
        outcome = "written"
    except Exception as error:
        outcome = "FileAlreadyExistsException" if "FileAlreadyExistsException" in str(error) else str(error)
    assert lines.met, outcome[:1500]
    there = text(spark, fs, path)
    if kept == "this driver's":
        assert (outcome, there) == ("written", '{"commitInfo":{"by":"this driver"}}\n')  # the other's is lost
    else:
        assert (outcome, there) == ("FileAlreadyExistsException", '{"commitInfo":{"by":"the other driver"}}\n')


def test_the_log_store_gives_a_version_to_one_writer(spark, s3_root):
    store, conf = log_store(spark), spark._jsc.hadoopConfiguration()
    path, fs = jpath(spark, f"{s3_root}/_delta_log/00000000000000000000.json")
    store.write(path, java_lines(spark, '{"a":1}'), False, conf)
    with pytest.raises(Exception, match="FileAlreadyExistsException"):
        store.write(path, java_lines(spark, '{"b":2}'), False, conf)
    store.write(path, java_lines(spark, '{"a":1}'), False, conf)  # its own bytes again: an SDK retry landed
    assert text(spark, fs, path) == '{"a":1}\n'
    assert not store.isPartialWriteVisible(path, conf)


def test_a_store_without_conditional_create_is_told(spark, s3_root, plain_bucket):
    assert conditional_create(spark, f"{s3_root}/cp") is True
    assert conditional_create(spark, f"s3a://{plain_bucket}/cp") is False


def test_the_lease_on_s3_refuses_a_second_copy_and_a_stale_one_is_taken_over(spark, s3_root):
    checkpoint = f"{s3_root}/checkpoint"
    first = StoreLease("orders", checkpoint, spark)
    first.acquire()
    try:
        with pytest.raises(AlreadyRunning, match="orders is already running"):
            StoreLease("orders", checkpoint, spark).acquire()
        # the first copy stalls past the expiry: its lease, as a crashed holder leaves it
        path, fs = jpath(spark, f"{checkpoint}/{LEASE_FILE}")
        stale = {**json.loads(text(spark, fs, path)), "heartbeat": time.time() - STALE_AFTER_S - 1}
        stream = fs.createFile(path).overwrite(True).build()
        stream.write(bytearray(json.dumps(stale).encode()))
        stream.close()
        second = StoreLease("orders", checkpoint, spark)
        second.acquire()
        # the first copy's next heartbeat finds its lease changed
        wait_for(lambda: first.lost, 30, "the first copy to find its lease taken over")
        assert not second.lost
        second.release()
        assert not fs.exists(path)
    finally:
        first.release()

