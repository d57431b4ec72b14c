"""The per-table fault point and the per-table transaction id (no JVM)."""

from __future__ import annotations

import pytest

from ingest.batch.commit import faults, ledger


def test_between_tables_is_a_fault_point():
    assert faults.parse("between_tables:batch=2") == faults.Fault("between_tables", batch=2)
    with pytest.raises(faults.FaultSpecError):
        faults.parse("between_table")


def test_each_table_has_its_own_app_id_and_the_single_table_one_is_unchanged():
    single = ledger.app_id("shop", "q1")
    orders, refunds = ledger.app_id("shop", "q1", "/t/shop_orders"), ledger.app_id("shop", "q1", "/t/shop_refunds")
    assert single == "ingest-shop-q1"
    assert len({single, orders, refunds}) == 3
    assert orders.startswith(single)
