"""Two writers of one S3 table, and the lease on S3, against moto's S3 server (a stand-in
speaking S3's protocol on loopback) through hadoop-aws's S3A client and Delta.

Without a condition, two S3A creates of one absent file that overlap both succeed and the
first one's bytes are gone: what two drivers on Delta's single-driver log store do to a
commit. With S3's put-if-absent the second fails, and ingest's log store turns that into
Delta's retry: no commit is lost.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from ingest.stream.lease import LEASE_FILE, STALE_AFTER_S, AlreadyRunning
from ingest.stream.store_lease import StoreLease, conditional_create
from tests.s3_stand_in import BUCKET, PLAIN_BUCKET

IF_ABSENT = "fs.option.create.conditional.overwrite"


@pytest.fixture
def s3_root(s3, request):
    return f"s3a://{BUCKET}/{request.node.name}"


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


def log_store(spark):
    return spark._jvm.ingest.delta.S3ConditionalLogStore(spark._jsc.hadoopConfiguration())


def java_lines(spark, *lines):
    listed = spark._jvm.java.util.ArrayList()
    for line in lines:
        listed.add(line)
    return listed.iterator()


def test_the_log_store_gives_a_version_to_one_writer(spark, s3_root):
    store, conf = log_store(spark), spark._jsc.hadoopConfiguration()
    path, fs = jpath(spark, f"{s3_root}/_delta_log/00000000000000000000.json")
    store.write(path, java_lines(spark, '{"a":1}'), False, conf)
    with pytest.raises(Exception, match="FileAlreadyExistsException"):
        store.write(path, java_lines(spark, '{"b":2}'), False, conf)
    store.write(path, java_lines(spark, '{"a":1}'), False, conf)  # its own bytes again: an SDK retry landed
    assert text(spark, fs, path) == '{"a":1}\n'
    assert not store.isPartialWriteVisible(path, conf)


def test_delta_commits_racing_on_s3_are_all_kept(spark, s3_root):
    """Two writers append to one table at once, each commit a version: a writer that loses a
    version to the other retries at the next one. Every append is in the table."""
    table, per_writer = f"{s3_root}/race", 4
    spark.range(0).selectExpr("cast(id as string) as id").write.format("delta").save(table)
    errors = []

    def writer(name):
        session = spark.newSession()
        try:
            for n in range(per_writer):
                session.range(1).selectExpr(f"'{name}-{n}' as id").write.format("delta").mode("append").save(table)
        except Exception as error:
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("a", "b")]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, [str(e)[:600] for e in errors]
    rows = {r.id for r in spark.read.format("delta").load(table).collect()}
    assert rows == {f"{w}-{n}" for w in "ab" for n in range(per_writer)}
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()
    appends = [h for h in history if h.operation == "WRITE" and h.version > 0]
    assert len(appends) == 2 * per_writer
    retried = [h.version for h in appends if h.readVersion < h.version - 1]
    print(f"{2 * per_writer} appends in {time.monotonic() - started:.1f} s, "
          f"{len(retried)} committed after losing a version to the other writer")
    assert retried, "the writers never raced: nothing was tested"


def test_a_store_without_conditional_create_is_told(spark, s3):
    assert conditional_create(spark, f"s3a://{BUCKET}/cp") is True
    assert conditional_create(spark, f"s3a://{PLAIN_BUCKET}/cp") is False


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
        time.sleep(6)  # the first copy's next heartbeat finds its lease changed
        assert first.lost and not second.lost
        second.release()
        assert not fs.exists(path)
    finally:
        first.release()

