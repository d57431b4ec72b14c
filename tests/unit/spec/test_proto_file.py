"""A local .proto compiled with protoc (grpcio-tools): descriptors of the file and its
imports, dependencies first; a file that does not compile is reported with protoc's line."""

from __future__ import annotations

import pytest
from google.protobuf import descriptor_pb2

from ingest.spec.proto_file import ProtoFileError, compile_proto

ORDER = """\
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "money.proto";
message Order {
  message Customer { string id = 1; }
  string order_id = 1;
  google.protobuf.Timestamp ts = 2;
  Customer customer = 3;
  shop.Money price = 4;
}
"""


def test_a_proto_and_its_imports_compile_dependencies_first(tmp_path):
    (tmp_path / "money.proto").write_text('syntax = "proto3";\npackage shop;\n'
                                          "message Money { int64 units = 1; string currency = 2; }\n")
    (tmp_path / "order.proto").write_text(ORDER)
    files = [descriptor_pb2.FileDescriptorProto.FromString(f) for f in compile_proto(tmp_path / "order.proto")]
    assert sorted(f.name for f in files[:-1]) == ["google/protobuf/timestamp.proto", "money.proto"]
    order = files[-1]
    assert order.name == "order.proto" and order.message_type[0].nested_type[0].name == "Customer"


def test_a_proto_that_does_not_compile_names_the_line(tmp_path):
    (tmp_path / "order.proto").write_text(ORDER.replace("string order_id", "strin order_id"))
    with pytest.raises(ProtoFileError, match=r"does not compile: .*order\.proto:7:\d+: \"strin\" is not defined"):
        compile_proto(tmp_path / "order.proto")  # also: money.proto is missing


def test_a_missing_file_is_said(tmp_path):
    with pytest.raises(ProtoFileError, match="cannot read .*nowhere.proto: no such file"):
        compile_proto(tmp_path / "nowhere.proto")
