"""The one pipeline that writes a table: the retry that checks it again, the refusal's words."""

import pytest
from delta.exceptions import MetadataChangedException

from ingest.batch.commit.conflicts import retry_conflicts
from ingest.batch.commit.owner import OwnerCheck, TableOwned, hand_over_sql, refusal
from ingest.spec.model import Target
from tests.unit.batch.commit.test_conflicts import Flaky


def test_a_merge_retried_after_a_conflict_checks_the_owner_again_first(monkeypatch):
    owner = OwnerCheck("shop_a", Target(path="/data/tables/a"))
    checks = []
    monkeypatch.setattr(owner, "check", lambda session: checks.append(action.calls))
    action = Flaky(MetadataChangedException(message="metadata changed"))
    assert retry_conflicts(owner.rechecked("session", action), "MERGE", sleep=lambda s: None) == "committed"
    assert checks == [1]  # not before the first attempt (the batch checked already), before the second


def test_a_retry_into_a_table_handed_over_meanwhile_is_not_tried(monkeypatch):
    owner = OwnerCheck("shop_a", Target(path="/data/tables/a"))

    def handed_over(session):
        raise TableOwned(refusal(owner.table, "shop_b", "shop_a", "nothing of this batch was written"))

    monkeypatch.setattr(owner, "check", handed_over)
    action = Flaky(MetadataChangedException(message="metadata changed"))
    with pytest.raises(TableOwned, match="is written by pipeline shop_b"):
        retry_conflicts(owner.rechecked("session", action), "MERGE", sleep=lambda s: None)
    assert action.calls == 1


def test_the_hand_over_statement_names_the_table_as_sql_does():
    assert hand_over_sql(Target(table="main.shop.orders"), "shop_b") == \
        "ALTER TABLE main.shop.orders SET TBLPROPERTIES ('ingest.pipeline' = 'shop_b')"
    assert hand_over_sql(Target(path="/data/odd`name"), "shop_b") == \
        "ALTER TABLE delta.`/data/odd``name` SET TBLPROPERTIES ('ingest.pipeline' = 'shop_b')"


def test_the_refusal_names_the_table_its_writer_this_pipeline_and_what_to_do():
    said = refusal(Target(table="main.shop.orders"), "shop_a", "shop_b", "nothing of this batch was written")
    assert said.startswith("shop_b: table main.shop.orders is written by pipeline shop_a (table property "
                           "ingest.pipeline), not by shop_b; nothing of this batch was written. ")
    assert "`ingest status` of each pipeline file lists the topics its pattern matches" in said
    assert said.endswith("stop shop_a first, then: ALTER TABLE main.shop.orders SET TBLPROPERTIES "
                         "('ingest.pipeline' = 'shop_b')")
