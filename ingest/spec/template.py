"""Target templates: one pipeline, one table per topic.

`${topic}` in `target.path`, `target.table`, `dead_letter.path` or
`dead_letter.table` stands for the topic a record came from (pipeline-spec.md,
"Many topics, one job"). It is not an environment variable: the loader keeps
it as written, and `for_topic` fills it in once a topic is known. Pure: no
Spark, no broker.
"""

from __future__ import annotations

import re
from dataclasses import replace

from ingest.spec.model import Pipeline

VARIABLES = ("topic",)
TOPIC = "${topic}"
# The keys a template variable may appear in.
TEMPLATE_KEYS = ("target.path", "target.table", "dead_letter.path", "dead_letter.table")
_NOT_IN_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")


def is_per_topic(pipeline: Pipeline) -> bool:
    """True when the target is a template: each topic writes a table of its own."""
    return TOPIC in (pipeline.target.path or pipeline.target.table or "")


def topic_name(topic: str, in_table_name: bool = False) -> str:
    """The contract's `${topic}`: the topic name, dots as underscores. In a catalog
    table name every other character an unquoted identifier cannot hold (Kafka
    allows `-`) becomes `_` too, so that `shop.orders-eu` names a valid table."""
    name = topic.replace(".", "_")
    return _NOT_IN_IDENTIFIER.sub("_", name) if in_table_name else name


def render(text: str | None, topic: str, in_table_name: bool = False) -> str | None:
    if text is None:
        return None
    return text.replace(TOPIC, topic_name(topic, in_table_name))


def for_topic(pipeline: Pipeline, topic: str) -> Pipeline:
    """The single-table pipeline that `topic`'s records go through: target and
    dead letters rendered, the topic's own schema if `source.schemas` names one,
    and with a registry but no `subject`, the topic's own subject `<topic>-value`."""
    target = pipeline.target
    dead = pipeline.dead_letter
    source = pipeline.source
    schema = source.schemas.get(topic, source.schema) if source.schemas else source.schema
    registry = source.registry
    if registry is not None and not registry.subject:
        registry = replace(registry, subject=subject_of(topic))
    return replace(
        pipeline,
        source=replace(source, schema=schema, registry=registry),
        target=replace(target, path=render(target.path, topic),
                       table=render(target.table, topic, in_table_name=True)),
        dead_letter=replace(dead, path=render(dead.path, topic),
                            table=render(dead.table, topic, in_table_name=True)),
    )


def subject_per_topic(pipeline: Pipeline) -> bool:
    """A registry without `subject` and a table per topic: each topic reads its own subject."""
    registry = pipeline.source.registry
    return registry is not None and not registry.subject and is_per_topic(pipeline)


def subject_of(topic: str) -> str:
    """The registry subject of a topic's values (Confluent's TopicNameStrategy): the
    topic name as it is, dots included."""
    return f"{topic}-value"


def table_key(pipeline: Pipeline, topic: str) -> str:
    """Which table a topic's records go to: topics that render to the same table
    (`a.b` and `a_b`) share it, and its one transaction id."""
    return for_topic(pipeline, topic).target.location


def tables_of(pipeline: Pipeline, topics) -> dict[str, list[str]]:
    """Table -> the topics it takes, each list sorted."""
    tables: dict[str, list[str]] = {}
    for topic in sorted(topics):
        tables.setdefault(table_key(pipeline, topic), []).append(topic)
    return tables


