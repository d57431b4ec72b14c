"""The units `make test`'s workers take, and their order (tests/scheduling.py)."""

import json

from tests.scheduling import SHARING_THE_DEMO, longest_first, recorded, unit_of

HARNESS = "tests/integration/test_crash_harness.py::test_exactly_once_through_crashes"
CELL = ("tests/integration/test_matrix.py::test_every_kind_is_exact_through_crashes_a_lost_checkpoint_and_a_replay"
        "[upsert-per_topic-json]")


def units(*nodeids: str) -> dict[str, dict[str, bool]]:
    found: dict[str, dict[str, bool]] = {}
    for nodeid in nodeids:
        found.setdefault(unit_of(nodeid), {})[nodeid] = False
    return found


def test_the_demo_files_are_one_unit_the_split_files_a_unit_per_test_the_rest_a_unit_per_file():
    assert {unit_of(f"{file}::test_x") for file in SHARING_THE_DEMO} == {SHARING_THE_DEMO[0]}
    assert unit_of(CELL) == CELL and unit_of(HARNESS) == HARNESS
    assert unit_of("tests/unit/test_layers.py::test_a[x]") == "tests/unit/test_layers.py"


def test_a_few_long_tests_go_before_many_short_ones():
    layers = [f"tests/unit/test_layers.py::test_module[{n}]" for n in range(483)]
    order = longest_first(units(*layers, "tests/integration/test_first_pipeline.py::test_guide", CELL, HARNESS), {})
    assert order[-1] == "tests/unit/test_layers.py"
    assert order[0] == HARNESS


def test_the_last_runs_seconds_decide_where_recorded_without_the_workers_start_ups(tmp_path):
    durations = tmp_path / "durations.json"
    rows = [{"test": "tests/unit/test_a.py::test_one", "total": 100.0, "spark_start": 30.0, "broker_start": 10.0},
            {"test": "tests/unit/test_a.py::test_two", "total": 5.0},
            {"test": "tests/unit/test_b.py::test_one", "total": 50.0}]
    durations.write_text(json.dumps({"tests": rows}))
    known = recorded(str(durations))
    assert known == {"tests/unit/test_a.py": 65.0, "tests/unit/test_b.py": 50.0}
    assert longest_first(units("tests/unit/test_b.py::test_one", "tests/unit/test_a.py::test_one"), known) == [
        "tests/unit/test_a.py", "tests/unit/test_b.py"]
    assert recorded(str(tmp_path / "none.json")) == {} and recorded(None) == {}
