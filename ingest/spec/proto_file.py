"""A local `.proto` schema file compiled to descriptors, when a run or `ingest produce` starts.

The compiler is protoc itself, as grpcio-tools ships it (Google's, the `protobuf-files`
extra): imports, nested messages, enums and the well-known types resolve exactly as
protoc resolves them, which a hand-written .proto parser would only approximate. It
runs on the driver only, in a child process so its messages can be reported; executors
get the serialized descriptors, as they do from a registry. Imports are found beside
the file and among the well-known types (`google/protobuf/*.proto`).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

from ingest.errors import IngestError

COMPILE_TIMEOUT_S = 120  # protoc takes well under a second; the rest is room for a busy machine
EXTRA = "ingest[protobuf-files]"


class ProtoFileError(IngestError):
    """A .proto file that cannot be read or compiled (bad input)."""


def compile_proto(path: str | Path) -> tuple[bytes, ...]:
    """The serialized FileDescriptorProtos of the file and of every file it imports,
    dependencies first, the file itself last."""
    file = Path(path)
    if not file.is_file():
        raise ProtoFileError(f"cannot read {path}: no such file")
    if importlib.util.find_spec("grpc_tools") is None:
        raise ProtoFileError(f"{path} is a .proto file, compiled with protoc from grpcio-tools, which "
                             f"is not installed; expected it installed (pip install '{EXTRA}')")
    with tempfile.TemporaryDirectory(prefix="ingest-protoc-") as work:
        descriptors = Path(work) / "descriptors.pb"
        done = subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={file.parent.resolve()}",
             "--include_imports", f"--descriptor_set_out={descriptors}", file.name],
            capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        if done.returncode != 0 or not descriptors.is_file():
            said = "; ".join(line.strip() for line in done.stderr.splitlines() if line.strip())
            raise ProtoFileError(f"{path} does not compile: {said[:600] or f'protoc exit {done.returncode}'}")
        data = descriptors.read_bytes()
    from google.protobuf import descriptor_pb2

    return tuple(f.SerializeToString() for f in descriptor_pb2.FileDescriptorSet.FromString(data).file)
