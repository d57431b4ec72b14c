"""A TEST STAND-IN for a Confluent Schema Registry: not a registry to run anything on.

No Schema Registry server installs from the package registries this project
reaches (Confluent's and Apicurio's are not on Maven Central, Karapace is not on
PyPI), so the tests run this small one on 127.0.0.1 with the stdlib's
http.server. It speaks the part of the REST API that confluent-kafka's
`SchemaRegistryClient` and serializers use (register, look up, get by id, a
subject's versions) plus basic auth, so the records in the topics are in the
real Confluent wire format, written by the real serializers. Optionally it
takes a bearer token instead, and serves HTTPS with a certificate the test made.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class StandInRegistry:
    """Schemas by id and subjects' versions, in memory; optional basic or bearer auth,
    optional TLS (`tls`: the server's certificate and key, PEM files)."""

    def __init__(self, user: str | None = None, password: str | None = None, *,
                 token: str | None = None, tls: tuple[str, str] | None = None):
        self.credentials = f"{user}:{password}" if user else None
        self.token = token
        self.schemas: list[dict] = []  # id - 1 -> {"schema", "schemaType", "references"}
        self.subjects: dict[str, list[int]] = {}  # subject -> schema id per version
        self.requests: list[str] = []  # paths asked, for tests that count fetches
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.scheme = "https" if tls else "http"
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> StandInRegistry:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def register(self, subject: str, schema: dict) -> tuple[int, int]:
        """(schema id, version); the same schema text gets the same id, as the real one does."""
        with self.lock:
            entry = {"schema": schema["schema"], "schemaType": schema.get("schemaType", "AVRO"),
                     "references": schema.get("references") or []}
            if entry in self.schemas:
                schema_id = self.schemas.index(entry) + 1
            else:
                self.schemas.append(entry)
                schema_id = len(self.schemas)
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id, versions.index(schema_id) + 1

    def answer(self, method: str, path: str, query: dict, body: dict | None) -> tuple[int, dict | list]:
        by_id = re.fullmatch(r"/schemas/ids/(\d+)", path)
        if by_id and method == "GET":
            return self._schema(int(by_id.group(1)))
        versions = re.fullmatch(r"/subjects/([^/]+)/versions", path)
        if versions and method == "POST":
            schema_id, version = self.register(unquote(versions.group(1)), body or {})
            return 200, {"id": schema_id, "version": version}
        if versions and method == "GET":
            found = self.subjects.get(unquote(versions.group(1)))
            return (200, list(range(1, len(found) + 1))) if found else _not_found(40401, "Subject not found")
        version = re.fullmatch(r"/subjects/([^/]+)/versions/(latest|\d+)", path)
        if version and method == "GET":
            return self._version(unquote(version.group(1)), version.group(2))
        lookup = re.fullmatch(r"/subjects/([^/]+)", path)
        if lookup and method == "POST":
            return self._lookup(unquote(lookup.group(1)), body or {})
        if path == "/subjects" and method == "GET":
            return 200, sorted(self.subjects)
        return 404, {"error_code": 404, "message": f"HTTP 404 Not Found: {method} {path}"}

    def _schema(self, schema_id: int) -> tuple[int, dict]:
        if not 1 <= schema_id <= len(self.schemas):
            return _not_found(40403, "Schema not found")
        return 200, {"id": schema_id, **self.schemas[schema_id - 1]}

    def _version(self, subject: str, version: str) -> tuple[int, dict]:
        ids = self.subjects.get(subject)
        if not ids:
            return _not_found(40401, "Subject not found")
        number = len(ids) if version == "latest" else int(version)
        if not 1 <= number <= len(ids):
            return _not_found(40402, "Version not found")
        schema_id = ids[number - 1]
        return 200, {"subject": subject, "version": number, "id": schema_id, **self.schemas[schema_id - 1]}

    def _lookup(self, subject: str, body: dict) -> tuple[int, dict]:
        for number, schema_id in enumerate(self.subjects.get(subject, []), start=1):
            if self.schemas[schema_id - 1]["schema"] == body.get("schema"):
                return 200, {"subject": subject, "version": number, "id": schema_id,
                             **self.schemas[schema_id - 1]}
        return _not_found(40403, "Schema not found")


def _not_found(code: int, message: str) -> tuple[int, dict]:
    return 404, {"error_code": code, "message": message}


def _handler(registry: StandInRegistry):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

        def _serve(self, method: str) -> None:
            if (registry.credentials or registry.token) and not self._authorized():
                return self._send(401, {"error_code": 401, "message": "Unauthorized"})
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            registry.requests.append(parts.path)
            status, answer = registry.answer(method, parts.path, parse_qs(parts.query), body)
            self._send(status, answer)

        def _authorized(self) -> bool:
            expected = (f"Bearer {registry.token}" if registry.token else
                        "Basic " + base64.b64encode(registry.credentials.encode()).decode())
            return self.headers.get("Authorization") == expected

        def _send(self, status: int, answer) -> None:
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:  # quiet: pytest shows failures, not every GET
            pass

    return Handler
