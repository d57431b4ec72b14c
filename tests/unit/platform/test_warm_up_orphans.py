"""What a run killed during its warm-up leaves, removed by the next run's warm-up."""

import os
import subprocess
import sys

from ingest.platform import warm_up


def test_the_folders_of_gone_runs_are_removed_and_no_other(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    orphan = tmp_path / f"{warm_up.PREFIX}{gone.pid}-x1y2z3"
    running = tmp_path / f"{warm_up.PREFIX}{os.getpid()}-a1b2c3"  # a warm-up under way
    older = tmp_path / f"{warm_up.PREFIX}k2j4_8q1"  # named before the pid was in the name: whose, unknown
    unrelated = tmp_path / f"other-{gone.pid}-x"
    for folder in (orphan, running, older, unrelated):
        (folder / "_delta_log").mkdir(parents=True)

    warm_up.remove_orphans(str(tmp_path))

    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (running, older, unrelated))
