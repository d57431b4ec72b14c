"""A Confluent-compatible Schema Registry, read over its REST API.

Only what decoding needs: a schema by id (the writer schemas) and a subject's
version (the reader schema). It runs on the driver only, so executors (and
Databricks serverless) never need to reach the registry. Stdlib HTTP keeps it
free of the client libraries' retry loops: a registry that does not answer is
reported at once, with its URL masked, as a `RegistryUnavailable` that stops
the run; a schema the registry says it does not have is a `SchemaNotFound`,
which the decoder turns into dead letters for the records that name it.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from ingest.errors import IngestError
from ingest.spec.model import Registry
from ingest.spec.settings import mask_url

TIMEOUT_S = 10.0
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
# Confluent's error codes for a subject, version or schema id that does not exist.
NOT_FOUND_CODES = (40401, 40402, 40403)


class RegistryUnavailable(IngestError):
    """The registry did not answer, or refused us (down, 401/403, TLS): stop the run."""


class SchemaNotFound(IngestError):
    """The registry answered: it has no such schema id, subject or version."""


@dataclass(frozen=True)
class RegisteredSchema:
    id: int
    schema_type: str  # AVRO | PROTOBUF | JSON
    text: str  # the schema as the registry holds it (Avro JSON, .proto text or base64 descriptor)
    references: tuple[dict, ...] = ()
    version: int | None = None


class RegistryClient:
    def __init__(self, registry: Registry, timeout_s: float = TIMEOUT_S):
        self.registry = registry
        self.base = _without_userinfo(registry.url).rstrip("/")
        self.shown = mask_url(registry.url.rstrip("/"))  # for messages: the user, not the password
        self.timeout_s = timeout_s
        self._context = _tls_context(registry) if registry.url.startswith("https") else None

    def schema_by_id(self, schema_id: int, serialized: bool = False) -> RegisteredSchema:
        """The schema with this id; `serialized` asks for Protobuf as a base64 descriptor."""
        query = "?format=serialized" if serialized else ""
        body = self._get(f"/schemas/ids/{int(schema_id)}{query}", f"schema id {schema_id}")
        return _registered(body, schema_id)

    def subject_version(self, subject: str, version: str | int = "latest",
                        serialized: bool = False) -> RegisteredSchema:
        query = "?format=serialized" if serialized else ""
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{version}{query}"
        body = self._get(path, f"subject {subject!r} version {version}")
        return _registered(body, body.get("id"))

    def _get(self, path: str, what: str) -> dict:
        request = urllib.request.Request(self.base + path, headers=self._headers())
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._context) as answer:
                return json.loads(answer.read().decode("utf-8"))
        except urllib.error.HTTPError as error:
            raise self._http_error(error, what) from None
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            raise RegistryUnavailable(f"schema registry {self.shown} did not answer "
                                      f"for {what}: {reason}") from None

    def _http_error(self, error: urllib.error.HTTPError, what: str) -> IngestError:
        detail = _error_detail(error)
        if error.code == 404 and detail.get("error_code", 40400) in NOT_FOUND_CODES + (40400,):
            return SchemaNotFound(f"schema registry {self.shown} has no {what}"
                                  f" ({detail.get('message', 'not found')})")
        hint = " (check source.registry.auth)" if error.code in (401, 403) else ""
        return RegistryUnavailable(f"schema registry {self.shown} answered HTTP "
                                   f"{error.code} for {what}{hint}")

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": f"{CONTENT_TYPE}, application/json"}
        basic = self.registry.basic or _url_userinfo(self.registry.url)
        if basic:
            headers["Authorization"] = "Basic " + base64.b64encode(basic.encode()).decode("ascii")
        elif self.registry.bearer:
            headers["Authorization"] = f"Bearer {self.registry.bearer}"
        return headers


def _registered(body: dict, schema_id) -> RegisteredSchema:
    return RegisteredSchema(
        id=int(schema_id), schema_type=body.get("schemaType", "AVRO"), text=body["schema"],
        references=tuple(body.get("references") or ()), version=body.get("version"))


def _error_detail(error: urllib.error.HTTPError) -> dict:
    try:
        detail = json.loads(error.read().decode("utf-8"))
        return detail if isinstance(detail, dict) else {}
    except (ValueError, OSError):
        return {}


def _url_userinfo(url: str) -> str | None:
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return None
    return f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"


def _without_userinfo(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urllib.parse.urlunsplit(parts._replace(netloc=host))


def _tls_context(registry: Registry) -> ssl.SSLContext:
    tls = registry.tls
    context = ssl.create_default_context(cafile=tls.ca if tls else None)
    if tls and tls.cert:
        context.load_cert_chain(tls.cert, tls.key)
    return context
