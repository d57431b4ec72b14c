"""`ingest plan`: what a pipeline will do, as text or JSON, secrets masked.

Every line that describes runtime behaviour comes from the function the
runtime itself calls (Kafka options from `source`, the MERGE condition from
`merge_condition`, the transaction app id from `ledger`), so the plan cannot
drift from what runs.
"""

from __future__ import annotations

import textwrap

from ingest.batch.commit import ledger
from ingest.batch.merge.condition import merge_condition, upsert_condition
from ingest.cli.options import load_one, pipeline_file, settings_of
from ingest.cli.output import OK, to_json
from ingest.errors import IngestError
from ingest.kafka.source import kafka_options
from ingest.spec import template
from ingest.spec.document import to_document, to_yaml
from ingest.spec.loader import Loaded
from ingest.spec.locations import shown_location
from ingest.spec.model import REGISTRY_FORMATS, Pipeline
from ingest.spec.settings import Settings, mask, mask_mapping, mask_values
from ingest.spec.variant_path import is_path

NEEDS_SPARK = False  # a plan is read from the spec; the few parts that need pyspark import it themselves
INDENT = "  "
CHECKPOINT_QUERY_ID = "<query id of the checkpoint>"
INGEST_COLUMNS_TEXT = "_topic, _partition, _offset, _kafka_timestamp, _ingested_at"


def add(commands, parents) -> None:
    command = commands.add_parser("plan", parents=parents, help="show what a pipeline will run",
                                  description="Print the resolved pipeline (secrets masked), the "
                                  "Kafka options, the target, the dead-letter table, the "
                                  "transaction id scheme and the MERGE condition.")
    pipeline_file(command)
    command.add_argument("--json", action="store_true", help="print the plan as JSON")


def run(args) -> int:
    settings = settings_of(args)
    loaded = load_one(args, settings)
    if args.json:
        print(to_json(plan_document(loaded, settings)))
    else:
        print(render_plan(loaded, settings), end="")
    return OK


def _property_changes(pipeline: Pipeline) -> list[str]:
    """What `run` would change in the properties of the tables that exist. Spark is started
    only when the pipeline names properties: the tables' own are read through Delta."""
    from ingest.batch.merge import properties

    if not properties.tables(pipeline) or template.is_per_topic(pipeline):
        return []
    from ingest.platform.session import get_session

    found = properties.differences(get_session("ingest-plan"), pipeline)
    return [one.line() for one in found] or ["the tables that exist have these values"]


def _properties(pipeline: Pipeline) -> str:
    from ingest.batch.commit.owner import OWNER
    from ingest.batch.merge.properties import ingest_properties

    def listed(values) -> str:
        return ", ".join(f"{key}={value}" for key, value in sorted(values.items())) or "none"

    lines = [f"target, at creation: ingest's {listed(ingest_properties(pipeline.target))} (where the session "
             f"has no default), then the pipeline's {listed(pipeline.target.properties)}",
             f"dead letters, at creation: the pipeline's {listed(pipeline.dead_letter.properties)}",
             f"target, its writer: {OWNER}={pipeline.name}, set at creation (a table made before is "
             f"adopted), checked before each batch: a table another pipeline writes is refused"]
    return "\n".join(lines + [f"on the tables now: {line}" for line in _property_changes(pipeline)])


def render_plan(loaded: Loaded, settings: Settings) -> str:
    """The whole plan screen; masked by key and by value."""
    pipeline = loaded.pipeline
    sections = [
        f"Pipeline {pipeline.name} ({loaded.index.file}, env {settings.env})",
        _section("Resolved spec (secrets masked)", to_yaml(mask_mapping(to_document(pipeline)))),
        _section("Kafka source options", _options(pipeline)),
        *([_section("Reader schema (Spark DDL)", _reader_schema(pipeline))]
          if pipeline.source.format in REGISTRY_FORMATS else []),
        *([_section("Columns from the messages", _columns_from_messages(pipeline))]
          if pipeline.columns_from_messages else []),
        _section("Target", _target(pipeline)),
        _section("Dead letters", _dead_letter(pipeline)),
        _section("Table properties", _properties(pipeline)),
        _section("Exactly once", _transactions(pipeline)),
        _section("MERGE, per micro-batch", _merge(pipeline)),
    ]
    sections += [_section("Warnings", "\n".join(w.render() for w in loaded.warnings))] \
        if loaded.warnings else []
    return mask("\n\n".join(sections), pipeline.secret_values) + "\n"


def plan_document(loaded: Loaded, settings: Settings) -> dict:
    """The plan as data (`ingest plan --json`), masked by key and by value like the screen."""
    pipeline = loaded.pipeline
    document = {
        "pipeline": pipeline.name, "file": loaded.index.file, "env": settings.env,
        "spec": mask_mapping(to_document(pipeline)),
        "kafka_options": mask_mapping(kafka_options(pipeline.source.kafka)),
        "target": _target(pipeline).splitlines(),
        "dead_letter": _dead_letter(pipeline).splitlines(),
        "table_properties": _properties(pipeline).splitlines(),
        "exactly_once": {"txn_app_id": ledger.app_id(pipeline.name, CHECKPOINT_QUERY_ID),
                         "txn_version": "the batch id"},
        "merge": _merge(pipeline),
        **({"columns_from_messages": _columns_from_messages(pipeline).splitlines()}
           if pipeline.columns_from_messages else {}),
        "warnings": [w.render() for w in loaded.warnings],
    }
    return mask_values(document, pipeline.secret_values)


def _section(title: str, body: str) -> str:
    return f"{title}:\n{textwrap.indent(body.rstrip(), INDENT)}"


def _options(pipeline: Pipeline) -> str:
    options = mask_mapping(kafka_options(pipeline.source.kafka))
    width = max(len(key) for key in options)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in sorted(options.items()))


def _reader_schema(pipeline: Pipeline) -> str:
    """The columns the run will decode to, from the registry's or the file's schema now."""
    source = pipeline.source
    if not template.subject_per_topic(pipeline):
        return _one_reader_schema(source)
    version = source.registry.version
    lines = [f"subject {template.subject_of('<topic>')} per topic (<topic>: the topic's name), "
             f"version {version}"]
    lines += [_one_reader_schema(template.for_topic(pipeline, topic).source)
              for topic in source.kafka.topics]
    if source.kafka.pattern:
        lines.append(f"each topic matching {source.kafka.pattern!r}: its subject's schema, read when "
                     "the topic's first records arrive")
    return "\n".join(lines)


def _columns_from_messages(pipeline: Pipeline) -> str:
    """cdc with json and no schema: the rule, and the columns each topic's table has taken so far
    (the topics subscribed now, each table that exists read through Delta)."""
    from ingest.batch.formats.schemas import ddl
    from ingest.batch.merge.properties import recorded_key
    from ingest.batch.merge.target import target_schema
    from ingest.batch.message_columns import row_columns
    from ingest.kafka import admin as kafka_admin
    from ingest.platform.delta import table_exists
    from ingest.platform.session import get_session

    lines = ["each topic's table takes its columns from the Connect schema in the topic's messages "
             "(Debezium's JSON converter, schemas.enable=true), with the columns its table has; a field "
             f"that appears later follows schema_evolution ({pipeline.schema_evolution}), a changed type "
             "is refused; a message without a schema is a decode dead letter",
             _key_rule(pipeline)]
    kafka = pipeline.source.kafka
    try:
        topics = sorted(set(kafka.topics) | set(kafka_admin.partitions(kafka)))
    except IngestError as error:
        topics = sorted(kafka.topics)
        lines.append(f"the topics the pattern matches now: not available ({error})")
    spark = get_session("ingest-plan")
    for topic in topics:
        one = template.for_topic(pipeline, topic) if template.is_per_topic(pipeline) else pipeline
        if not one.columns_from_messages:  # a topic with its own entry in source.schemas
            lines.append(f"{topic}: source.schemas.{topic}")
        elif table_exists(spark, one.target):
            columns = ddl(row_columns(topic, [], target_schema(spark, one.target), 'fail'))
            lines.append(f"{topic}: {columns}; key {_key_text(one, recorded_key(spark, one))}")
        else:
            lines.append(f"{topic}: no table yet; its columns{'' if one.cdc and one.cdc.key else ' and key'} "
                         "come with its first records")
    return "\n".join(lines)


def _key_rule(pipeline: Pipeline) -> str:
    if pipeline.cdc is not None and pipeline.cdc.key:
        return (f"the key: cdc.key ({', '.join(pipeline.cdc.key)}), checked against each message key's "
                "schema where it has one")
    return ("the key: each table's, the fields of its message keys' schema (Debezium's key converter, "
            "schemas.enable=true), taken at its first batch and kept on the table (ingest.cdc.key); "
            "a key that names other fields later is refused")


def _key_text(pipeline: Pipeline, recorded: tuple[str, ...]) -> str:
    """A table's key columns: cdc.key, or what the table recorded of its message keys' schema."""
    if pipeline.cdc is not None and pipeline.cdc.key:
        return f"({', '.join(pipeline.cdc.key)}) from cdc.key"
    if recorded:
        return f"({', '.join(recorded)}) from the message key's schema"
    return "not recorded on the table; the next batch takes it from the message key's schema"


def _one_reader_schema(source) -> str:
    from ingest.batch.formats.schemas import ddl, reader_columns

    where = (f"subject {source.subject}, version {source.registry.version}" if source.registry
             else source.schema_file)
    try:
        return f"{where}:\n{ddl(reader_columns(source))}"
    except IngestError as error:
        return f"{where}: not available ({error})"


def _where(location_path: str | None, table: str | None) -> str:
    if not location_path:
        return f"table {table}\nread it: SELECT * FROM {table}"
    where = shown_location(location_path)  # absolute: Spark SQL takes no relative delta.`path`
    return f"Delta table at {where}\nread it: SELECT * FROM delta.`{where}`"


def _target(pipeline: Pipeline) -> str:
    target = pipeline.target
    rule = ("the first copy of a uid wins" if target.mode == "insert_only" else
            f"the latest {target.order_by} wins (ties: the later Kafka position)")
    if pipeline.cdc is not None:
        from ingest.batch.formats.cdc import sequence_name  # it needs pyspark; plan of other pipelines must not

        rule = (f"each key ends as its last change by {sequence_name(pipeline.cdc)} (ties: the later "
                f"partition, then offset); deletes {target.deletes}"
                + (", every version kept (SCD2)" if target.history else ""))
    lines = [_where(target.path, target.table), f"mode {target.mode}: {rule}",
             f"uid: {_uid_text(pipeline)} -> _uid"]
    if target.partition_by:
        lines.append(f"partitioned by {', '.join(target.partition_by)}")
    if target.cluster_by:
        lines.append(f"clustered by {', '.join(target.cluster_by)} (liquid clustering)")
    if target.dedup_horizon:
        h = target.dedup_horizon
        lines.append(f"dedup horizon: a duplicate's {h.column} is within {h.within} "
                     f"({h.within_seconds} s) of the original's")
    lines.append(f"columns: _uid, the payload{' after transform' if pipeline.transform else ''}, "
                 f"{INGEST_COLUMNS_TEXT}{_change_columns(pipeline)}")
    lines.append(f"checkpoint: {shown_location(pipeline.checkpoint)}")
    lines.append(f"trigger: {_trigger_text(pipeline)}")
    return "\n".join(lines)


def _change_columns(pipeline: Pipeline) -> str:
    """The columns changes add (contract.md, "Tables it writes")."""
    if not pipeline.applies_deletes:
        return ""
    columns = ["_sequence", "_op"] + (["_deleted"] if pipeline.target.deletes == "soft" else [])
    if pipeline.target.history:
        columns += ["_valid_from", "_valid_to", "_current"]
    return ", " + ", ".join(columns)


def _uid_text(pipeline: Pipeline) -> str:
    if pipeline.key_from_messages:
        return "each table's key columns, from its message keys' schema (Columns from the messages, above)"
    uid = pipeline.uid
    return {
        "header": f"Kafka header {uid.header!r} (UTF-8)",
        "field": f"payload {'path' if uid.field and is_path(uid.field) else 'column'} {uid.field}",
        "fields": f"SHA-256 of columns {', '.join(uid.fields)}",
        "coordinates": "topic/partition/offset (exact only with idempotent producers)",
        "key": "the Kafka key (UTF-8)",
    }[uid.kind]


def _trigger_text(pipeline: Pipeline) -> str:
    trigger = pipeline.trigger
    if trigger.processing_time:
        return f"a micro-batch every {trigger.processing_time}"
    if trigger.available_now:
        return "available now: process what is in the topic, then stop"
    return "micro-batches back to back"


def _dead_letter(pipeline: Pipeline) -> str:
    dead = pipeline.dead_letter
    return (f"{_where(dead.path, dead.table)}\n"
            "records that fail decode, transform or uid, with their raw key, value and headers,\n"
            "merged on (pipeline, topic, partition, offset) under the same txn id")


def _transactions(pipeline: Pipeline) -> str:
    if template.is_per_topic(pipeline):  # batch.routing: each table commits on its own
        return "\n".join([
            f"txnAppId    {ledger.app_id(pipeline.name, CHECKPOINT_QUERY_ID, pipeline.target.location)}",
            "            one per table (${topic} filled in), stable for the life of the checkpoint",
            "txnVersion  the batch id: a replayed batch is a no-op in each table that has it",
            "commit      each table's commit carries its own topics' end offsets per partition",
        ])
    return "\n".join([
        f"txnAppId    {ledger.app_id(pipeline.name, CHECKPOINT_QUERY_ID)}",
        "            (stable for the life of the checkpoint; a new checkpoint gets a new one)",
        "txnVersion  the batch id: a replayed batch is a no-op",
        "commit      carries the batch's Kafka range for every partition, the topic ids and the pipeline",
    ])


def _merge(pipeline: Pipeline) -> str:
    target = pipeline.target
    into = f"delta.`{shown_location(target.path)}`" if target.path else target.table
    if pipeline.applies_deletes:
        from ingest.batch.merge import mode as merge_mode  # it needs pyspark; plan of other pipelines must not

        return "\n".join([f"MERGE WITH SCHEMA EVOLUTION INTO {into} AS t",
                          *merge_mode.merge_text(pipeline, merge_condition(pipeline, None))])
    lines = [f"MERGE WITH SCHEMA EVOLUTION INTO {into} AS t",
             "USING (the batch, one row per _uid) AS s",
             f"ON {merge_condition(pipeline, None)}"]
    if target.mode == "upsert":
        lines[1] = ("USING (the batch, one row per _uid, without the rows the update below would "
                    "skip or that change no value) AS s")
        lines.append(f"WHEN MATCHED AND ({upsert_condition(pipeline)}) AND NOT (every payload value the same) "
                     "THEN UPDATE SET *")
    lines.append("WHEN NOT MATCHED THEN INSERT *")
    return "\n".join(lines)
