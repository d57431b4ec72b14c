"""Which column changes a batch may bring to the target, by `schema_evolution`."""

from __future__ import annotations

import pytest
from pyspark.sql.types import BooleanType, IntegerType, StringType, StructField, StructType

from ingest.batch.schema_evolution import SchemaChangeRefused, check

TARGET = StructType.fromJson({"type": "struct", "fields": [
    {"name": "_uid", "type": "string", "nullable": False, "metadata": {}},
    {"name": "order_id", "type": "string", "nullable": False, "metadata": {}},
    {"name": "amount", "type": "long", "nullable": True, "metadata": {}},
    {"name": "customer", "type": {"type": "struct", "fields": [
        {"name": "id", "type": "string", "nullable": True, "metadata": {}}]}, "nullable": True,
     "metadata": {}},
]})


def batch(*changes):
    fields = [f for f in TARGET.fields if f.name not in {name for name, _ in changes}]
    schema = StructType(fields)
    for name, kind in changes:
        if kind is not None:
            schema = schema.add(name, kind, True)
    return schema


def test_the_same_columns_pass_under_either_policy():
    check(TARGET, batch(), "fail", "t")
    check(TARGET, batch(), "add_columns", "t")


def test_a_new_column_passes_with_add_columns_and_is_named_with_fail():
    check(TARGET, batch(("channel", StringType())), "add_columns", "t")
    with pytest.raises(SchemaChangeRefused, match=r"column channel \(string\) is new.*schema_evolution: fail"):
        check(TARGET, batch(("channel", StringType())), "fail", "t")


def test_a_new_nested_field_is_a_struct_delta_merges():
    check(TARGET, batch(("customer", StructType([StructField("id", StringType()),
                                                   StructField("vip", BooleanType())]))), "add_columns", "t")


def test_a_type_change_is_refused_whatever_the_policy():
    with pytest.raises(SchemaChangeRefused, match="amount is bigint in the target and int in the batch"):
        check(TARGET, batch(("amount", IntegerType())), "add_columns", "/data/orders")


def test_a_required_column_gone_is_refused_and_an_optional_one_is_not():
    check(TARGET, batch(("amount", None)), "fail", "t")
    with pytest.raises(SchemaChangeRefused, match="order_id is NOT NULL in the target and gone"):
        check(TARGET, batch(("order_id", None)), "add_columns", "t")


def test_widen_lets_through_the_widenings_delta_merges_and_refuses_the_rest_naming_both_types():
    from pyspark.sql.types import DateType, DecimalType, DoubleType, FloatType, LongType, TimestampNTZType

    from ingest.batch.schema_evolution import widens

    target = StructType([StructField("qty", IntegerType()), StructField("price", DecimalType(10, 2)),
                         StructField("day", DateType()), StructField("ratio", FloatType())])
    wider = StructType([StructField("qty", LongType()), StructField("price", DecimalType(12, 3)),
                        StructField("day", TimestampNTZType()), StructField("ratio", DoubleType())])
    check(target, wider, "widen", "t")
    with pytest.raises(SchemaChangeRefused, match=r"qty is int in the target and bigint in the batch "
                       r"\(Delta's type widening could take it: set schema_evolution: widen\)"):
        check(target, wider, "add_columns", "t")
    narrower = StructType([StructField("qty", StringType()), StructField("price", DecimalType(12, 1))])
    with pytest.raises(SchemaChangeRefused) as refused:
        check(target, narrower, "widen", "t")
    assert "qty is int in the target and string in the batch (a type Delta's MERGE does not widen" in str(
        refused.value)
    assert "price is decimal(10,2) in the target and decimal(12,1) in the batch" in str(refused.value)
    assert not widens(LongType(), IntegerType()) and not widens(IntegerType(), DoubleType())
