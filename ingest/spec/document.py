"""A `Pipeline` back to the contract's YAML: what `plan` prints, with the defaults
filled in, and text that loads back into an equal Pipeline."""

from __future__ import annotations

from typing import Any

from ingest.spec import operations as operations_spec
from ingest.spec import template
from ingest.spec.model import (
    Cdc,
    KafkaSource,
    Pipeline,
    Source,
    Target,
    Trigger,
    Uid,
)


def to_document(pipeline: Pipeline) -> dict:
    """The pipeline as the contract's YAML mapping, defaults filled in: what
    `plan` shows, and what loads back into an equal Pipeline."""
    document = {
        "name": pipeline.name,
        "source": _source_document(pipeline.source, pipeline.cdc is not None),
        "transform": _drop_empty({"select": list(pipeline.transform.select),
                                  "where": pipeline.transform.where}) if pipeline.transform else None,
        "cdc": _cdc_document(pipeline.cdc),
        "uid": None if pipeline.cdc else _uid_document(pipeline.uid),
        "target": _target_document(pipeline.target, deletes_apply(pipeline)),
        "checkpoint": pipeline.checkpoint,
        "dead_letter": _drop_empty({"path": pipeline.dead_letter.path,
                                    "table": pipeline.dead_letter.table,
                                    "max_share": pipeline.dead_letter.max_share,
                                    "properties": dict(pipeline.dead_letter.properties)}),
        "trigger": _trigger_document(pipeline.trigger),
        "spark_conf": dict(pipeline.spark_conf),
        "schema_evolution": pipeline.schema_evolution,
    }
    return {**_drop_empty(document, keep=("spark_conf",)), **operations_spec.to_document(pipeline.operations)}


def deletes_apply(pipeline: Pipeline) -> bool:
    """Whether anything in this pipeline deletes: cdc changes, or tombstones in an upsert by key."""
    return pipeline.applies_deletes


def _source_document(source: Source, with_cdc: bool = False) -> dict:
    registry = source.registry
    registry_document = None
    if registry is not None:
        tls = registry.tls
        registry_document = _drop_empty({
            "url": registry.url, "subject": registry.subject, "version": registry.version,
            "auth": _drop_empty({"basic": registry.basic, "bearer": registry.bearer}),
            "tls": _drop_empty({"ca": tls.ca, "cert": tls.cert, "key": tls.key}) if tls else None,
        })
    return _drop_empty({"kafka": _kafka_document(source.kafka), "format": source.format,
                        "schema": source.schema, "schemas": dict(source.schemas),
                        "registry": registry_document,
                        "schema_file": source.schema_file, "message": source.message,
                        "unknown_fields": source.unknown_fields
                        if source.format == "json" and not with_cdc and not source.variant else None})


def _kafka_document(kafka: KafkaSource) -> dict:
    starting = kafka.starting_offsets
    if not isinstance(starting, str):
        starting = {topic: dict(parts) for topic, parts in starting.items()}
    return _drop_empty({
        "bootstrap_servers": kafka.bootstrap_servers, "topics": list(kafka.topics),
        "pattern": kafka.pattern, "starting_offsets": starting,
        "max_offsets_per_trigger": kafka.max_offsets_per_trigger,
        "isolation_level": kafka.isolation_level,
        # the older spelling of on_data_loss: record, shown only where a file still uses it
        "allow_data_loss": True if kafka.allow_data_loss else None,
        "options": dict(kafka.options),
    }, keep=("options",))


def _cdc_document(cdc: Cdc | None) -> dict | None:
    if cdc is None:
        return None
    sequence = list(cdc.sequence) if isinstance(cdc.sequence, tuple) else cdc.sequence
    return _drop_empty({"format": cdc.format, "key": list(cdc.key), "sequence": sequence,
                        "encodings": dict(cdc.encodings)})


def _uid_document(uid: Uid) -> dict:
    value = {"header": uid.header, "field": uid.field, "fields": list(uid.fields),
             "coordinates": True, "key": True}[uid.kind]
    return {uid.kind: value}


def _target_document(target: Target, deletes_apply: bool = False) -> dict:
    horizon = target.dedup_horizon
    return _drop_empty({
        "path": target.path, "table": target.table, "mode": target.mode,
        "order_by": target.order_by, "partition_by": list(target.partition_by),
        "cluster_by": list(target.cluster_by),
        "dedup_horizon": {"column": horizon.column, "within": horizon.within} if horizon else None,
        "deletes": target.deletes if deletes_apply else None,
        "history": True if target.history else None,
        "properties": dict(target.properties),
    })


def _trigger_document(trigger: Trigger) -> dict:
    if trigger.processing_time:
        return {"processing_time": trigger.processing_time}
    return {"available_now": trigger.available_now}


def _drop_empty(values: dict, keep: tuple[str, ...] = ()) -> dict:
    return {key: value for key, value in values.items()
            if key in keep or value not in (None, [], {})}


def to_yaml(document: dict) -> str:
    """YAML text of a document; a literal ${ is written $${ so it loads back as is."""
    import yaml

    escaped = _escape_variables(document)
    return yaml.safe_dump(escaped, sort_keys=False, default_flow_style=None, allow_unicode=True,
                          width=100)


def _escape_variables(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _escape_variables(child) for key, child in value.items()}
    if isinstance(value, list):
        return [_escape_variables(child) for child in value]
    if not isinstance(value, str):
        return value
    # a target template stays as written: it is the contract's spelling, not a variable
    return value.replace("${", "$${").replace("$" + template.TOPIC, template.TOPIC)
