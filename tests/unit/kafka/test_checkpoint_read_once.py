"""A table-per-topic batch reads the checkpoint's offset log once for all its tables.

Each table's position asks for the batch's planned range; on an object store every read is a
Spark job, so 50 tables changing read the same two files 50 times a batch. The router reads
them once while its batch runs, and afresh after it (a later checkpoint at the same path)."""

from __future__ import annotations

import json
import threading

from ingest.kafka import checkpoint


def write_offsets(root, batch_id: int, offset: int) -> None:
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "offsets" / str(batch_id)).write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":0}\n' + json.dumps({"a.t": {"0": offset}}) + "\n")


def test_within_a_batch_each_offsets_file_is_read_once_for_every_table(tmp_path, monkeypatch):
    write_offsets(tmp_path, 3, 10)
    write_offsets(tmp_path, 4, 20)
    reads: list[str] = []
    read_text = checkpoint.read_text
    monkeypatch.setattr(checkpoint, "read_text", lambda session, where: reads.append(where) or read_text(session,
                                                                                                          where))
    with checkpoint.read_once(str(tmp_path)):
        tables = [threading.Thread(target=checkpoint.planned_end, args=(None, str(tmp_path), 4))
                  for _ in range(8)]
        for table in tables:
            table.start()
        for table in tables:
            table.join()
        assert checkpoint.planned_end(None, str(tmp_path), 4) == {"a.t": {0: 20}}
        assert checkpoint.planned_start(None, str(tmp_path) + "/", 4) == {"a.t": {0: 10}}
    assert reads.count(f"{tmp_path}/offsets/4") == 1
    assert reads.count(f"{tmp_path}/offsets/3") == 1


def test_after_the_batch_the_files_are_read_afresh(tmp_path):
    write_offsets(tmp_path, 0, 10)
    with checkpoint.read_once(str(tmp_path)):
        assert checkpoint.planned_end(None, str(tmp_path), 0) == {"a.t": {0: 10}}
        write_offsets(tmp_path, 0, 99)  # what no batch does; shows what is kept for how long
        assert checkpoint.planned_end(None, str(tmp_path), 0) == {"a.t": {0: 10}}
    assert checkpoint.planned_end(None, str(tmp_path), 0) == {"a.t": {0: 99}}  # a new checkpoint there
