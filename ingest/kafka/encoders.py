"""`ingest produce --format avro | protobuf`: a JSON object -> the record's value bytes.

With a registry, confluent-kafka's own serializers write the Confluent wire format
and register the schema under `<topic>-value` (what a pipeline's `source.registry`
reads); without one, the values are plain Avro or Protobuf (what
`source.schema_file` reads). A value that does not fit the schema raises the
serializer's own error, which `produce.parse_line` makes a bad line; a registry
that refuses raises `ProduceError`, which stops the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from ingest.kafka.produce import ProduceError
from ingest.spec.proto_file import compile_proto
from ingest.spec.settings import mask_url


def avro_encoder(schema_file: str | Path, topic: str, registry_url: str | None,
                 registry_auth: str | None = None) -> Callable[[dict], bytes]:
    """JSON objects as Avro: in the Confluent wire format through confluent-kafka's
    AvroSerializer with a registry, else plain Avro."""
    text = Path(schema_file).read_text(encoding="utf-8")
    if registry_url is None:
        return _plain_avro(text)
    from confluent_kafka.schema_registry.avro import AvroSerializer

    serializer = AvroSerializer(_client(registry_url, registry_auth), text,
                                conf={"auto.register.schemas": True})
    return _through_registry(serializer, topic, registry_url)


def protobuf_encoder(schema_file: str | Path, message: str, topic: str, registry_url: str | None,
                     registry_auth: str | None = None) -> Callable[[dict], bytes]:
    """JSON objects (protobuf's JSON mapping) as `message` of the compiled .proto: in the
    Confluent wire format (with message indexes) through confluent-kafka's
    ProtobufSerializer with a registry, else the plain message bytes."""
    from google.protobuf import descriptor_pool, json_format, message_factory

    pool = descriptor_pool.DescriptorPool()
    for file in compile_proto(schema_file):  # dependencies first
        pool.AddSerializedFile(file)
    try:
        message_class = message_factory.GetMessageClass(pool.FindMessageTypeByName(message))
    except KeyError:
        raise ProduceError(f"{schema_file} has no message {message}; expected a full name such as "
                           "shop.Order") from None

    def parsed(payload: dict):
        return json_format.ParseDict(payload, message_class())

    if registry_url is None:
        return lambda payload: parsed(payload).SerializeToString()
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    serializer = ProtobufSerializer(message_class, _client(registry_url, registry_auth),
                                    {"use.deprecated.format": False, "auto.register.schemas": True})
    encode = _through_registry(serializer, topic, registry_url)
    return lambda payload: encode(parsed(payload))


def _client(registry_url: str, registry_auth: str | None):
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": registry_url,
                                 **({"basic.auth.user.info": registry_auth} if registry_auth else {})})


def _through_registry(serializer, topic: str, registry_url: str) -> Callable:
    from confluent_kafka.serialization import MessageField, SerializationContext

    context = SerializationContext(topic, MessageField.VALUE)

    def encode(value) -> bytes:
        try:
            return serializer(value, context)
        except Exception as error:
            if _is_registry_failure(error):
                raise ProduceError(f"schema registry {mask_url(registry_url)}: {error}") from None
            raise

    return encode


def _plain_avro(text: str) -> Callable[[dict], bytes]:
    import io

    from fastavro import parse_schema, schemaless_writer

    schema = parse_schema(json.loads(text))

    def encode(payload: dict) -> bytes:
        out = io.BytesIO()
        schemaless_writer(out, schema, payload)
        return out.getvalue()

    return encode


def _is_registry_failure(error: Exception) -> bool:
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    return isinstance(error, SchemaRegistryError) or "connect" in type(error).__name__.lower()

