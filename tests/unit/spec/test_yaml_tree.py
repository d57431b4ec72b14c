"""Safe YAML with 1-based lines for every key path."""

from __future__ import annotations

from ingest.spec.yaml_tree import parent_path, read_yaml

TEXT = """\
# a comment
name: orders
source:
  kafka:
    topics:
      - a
      - b
  format: json
"""


def test_every_key_path_has_its_one_based_line():
    doc = read_yaml(TEXT, "f.yaml")
    lines = doc.index.lines
    assert (lines["name"], lines["source"], lines["source.kafka"]) == (2, 3, 4)
    assert (lines["source.kafka.topics"], lines["source.kafka.topics[1]"]) == (5, 7)
    assert lines["source.format"] == 8


def test_a_path_without_a_line_takes_its_nearest_ancestors():
    doc = read_yaml(TEXT, "f.yaml")
    assert doc.index.line("source.kafka.pattern") == 4
    assert doc.index.line("uid.header") == 2  # the file's first key


def test_values_are_plain_python():
    doc = read_yaml(TEXT, "f.yaml")
    assert doc.value == {"name": "orders", "source": {"kafka": {"topics": ["a", "b"]},
                                                      "format": "json"}}


def test_duplicate_key_is_a_problem_and_the_first_value_is_kept():
    doc = read_yaml("a: 1\nb: 2\na: 3\n", "f.yaml")
    [problem] = doc.problems
    assert (problem.code, problem.path, problem.line) == ("duplicate_key", "a", 3)
    assert doc.value == {"a": 1, "b": 2}


def test_tags_are_refused_not_run():
    doc = read_yaml("a: !!python/object/apply:os.system [echo hi]\nb: !custom x\n", "f.yaml")
    assert [(p.code, p.path) for p in doc.problems] == [("yaml_tag", "a"), ("yaml_tag", "b")]
    assert doc.value == {"a": None, "b": None}


def test_plain_scalars_keep_their_source_text_for_hints():
    doc = read_yaml("a: no\nb: 2024-01-01\nc: 'no'\n", "f.yaml")
    assert doc.index.texts == {"a": "no", "b": "2024-01-01"}


def test_syntax_error_has_line_and_context():
    doc = read_yaml("a: 1\nb: [1, 2\nc: 3\n", "f.yaml")
    [problem] = doc.problems
    assert problem.code == "yaml_syntax"
    assert problem.line == 3
    assert "> 3 | c: 3" in problem.context


def test_empty_document():
    doc = read_yaml("", "f.yaml")
    assert doc.value is None and doc.problems == ()


def test_parent_path():
    assert parent_path("a.b[2]") == "a.b"
    assert parent_path("a.b") == "a"
    assert parent_path("a") == ""
