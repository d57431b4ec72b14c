"""What a long run leaves on disk: the target's files and the checkpoint's, folder by folder."""

from __future__ import annotations

from pathlib import Path

CHECKPOINT_FOLDERS = ("offsets", "commits", "state", "sources")


def count_files(folder: Path) -> int:
    return sum(1 for path in folder.rglob("*") if path.is_file()) if folder.is_dir() else 0


def files_left(target: Path, checkpoint: Path) -> dict:
    log = count_files(target / "_delta_log")
    every = count_files(target)
    return {"target": every, "target_data": every - log, "target_log": log,
            "checkpoint": {name: count_files(checkpoint / name) for name in CHECKPOINT_FOLDERS}}
