"""The registry client against the test stand-in: schemas by id and version, auth,
and the two kinds of failure (no such schema; no answer), URL masked."""

from __future__ import annotations

import json
import socket

import pytest

from ingest.batch.formats.registry import RegistryClient, RegistryUnavailable, SchemaNotFound
from ingest.spec.model import Registry
from ingest.spec.settings import mask_url
from tests.schema_registry_stand_in import StandInRegistry

SCHEMA = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "string"}]}


@pytest.fixture(scope="module")
def stand_in():
    registry = StandInRegistry("svc", "pw-42").start()
    registry.register("orders-value", {"schema": json.dumps(SCHEMA)})
    yield registry
    registry.stop()


def client(stand_in, basic="svc:pw-42", url=None):
    return RegistryClient(Registry(url=url or stand_in.url, basic=basic), timeout_s=3)


def test_schema_by_id_and_latest_version(stand_in):
    latest = client(stand_in).subject_version("orders-value", "latest")
    assert (latest.id, latest.version, latest.schema_type) == (1, 1, "AVRO")
    assert json.loads(client(stand_in).schema_by_id(1).text) == SCHEMA


def test_credentials_in_the_url_are_used_and_masked(stand_in):
    url = stand_in.url.replace("http://", "http://svc:pw-42@")
    assert client(stand_in, basic=None, url=url).schema_by_id(1).id == 1
    assert mask_url(url) == stand_in.url.replace("http://", "http://svc:***@")


def test_an_unknown_id_is_not_found_not_unavailable(stand_in):
    with pytest.raises(SchemaNotFound, match="schema id 99"):
        client(stand_in).schema_by_id(99)


def test_401_stops_and_names_the_auth_key_without_the_password(stand_in):
    with pytest.raises(RegistryUnavailable) as raised:
        client(stand_in, basic="svc:wrong-pw").schema_by_id(1)
    assert "HTTP 401" in str(raised.value) and "source.registry.auth" in str(raised.value)
    assert "wrong-pw" not in str(raised.value)


def test_a_registry_that_is_down_stops_with_the_url_masked():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://svc:pw-42@127.0.0.1:{port}"
    with pytest.raises(RegistryUnavailable) as raised:
        RegistryClient(Registry(url=url), timeout_s=3).schema_by_id(1)
    assert f"127.0.0.1:{port} did not answer" in str(raised.value)
    assert "pw-42" not in str(raised.value)


def test_tls_to_a_plain_http_port_is_unavailable(stand_in):
    url = stand_in.url.replace("http://", "https://")
    with pytest.raises(RegistryUnavailable, match="did not answer"):
        client(stand_in, url=url).schema_by_id(1)
