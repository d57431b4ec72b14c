"""Protobuf message classes for tests, built from descriptors in code (no protoc here):
shop.Order with a nested message, an enum, a repeated field and a Timestamp, in two
versions (v2 adds a field), and an unrelated shop.Refund in the same file."""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

F = descriptor_pb2.FieldDescriptorProto


def _field(name, number, kind, type_name=None, repeated=False):
    field = F(name=name, number=number, type=kind,
              label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
    if type_name:
        field.type_name = type_name
    return field


def order_file(version: int, file_name: str) -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(name=file_name, package="shop", syntax="proto3",
                                              dependency=["google/protobuf/timestamp.proto"])
    order = file.message_type.add(name="Order")
    order.field.extend([
        _field("order_id", 1, F.TYPE_STRING),
        _field("amount", 2, F.TYPE_INT64),
        _field("ts", 3, F.TYPE_MESSAGE, ".google.protobuf.Timestamp"),
        _field("customer", 4, F.TYPE_MESSAGE, ".shop.Order.Customer"),
        _field("tags", 5, F.TYPE_STRING, repeated=True),
        _field("status", 6, F.TYPE_ENUM, ".shop.Order.Status"),
    ])
    if version >= 2:
        order.field.append(_field("channel", 7, F.TYPE_STRING))
    customer = order.nested_type.add(name="Customer")
    customer.field.extend([_field("id", 1, F.TYPE_STRING), _field("vip", 2, F.TYPE_BOOL)])
    status = order.enum_type.add(name="Status")
    status.value.add(name="NEW", number=0)
    status.value.add(name="PAID", number=1)
    refund = file.message_type.add(name="Refund")
    refund.field.append(_field("order_id", 1, F.TYPE_STRING))
    return file


def message_classes(version: int = 1) -> dict:
    """{"Order": class, "Refund": class} of that version, each version in a pool of its own."""
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(order_file(version, f"shop/order_v{version}.proto").SerializeToString())
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"shop.{name}"))
            for name in ("Order", "Refund")}
