"""Delta's conflicts as a Connect client receives them (issue 57 point 7 and its Low list): told
by the classes `delta.connect.exceptions` maps the server's errors to, and a conflict under the
pipeline's own txn app id (a query of a killed client, still finishing its batch on the server)
retried there, where it is not on a classic session (the lease prevents a second copy)."""

from __future__ import annotations

import pytest

pytest.importorskip("grpc", reason="the Connect client needs the connect extra: make test-connect")

from delta.connect.exceptions import ConcurrentTransactionException  # noqa: E402
from delta.exceptions import ConcurrentTransactionException as ClassicConcurrentTransaction  # noqa: E402

from ingest.batch.commit.conflicts import retry_conflicts  # noqa: E402
from tests.unit.batch.commit.test_conflicts import Flaky  # noqa: E402


def test_the_pipelines_own_app_id_on_connect_is_retried_and_not_on_a_classic_session():
    action = Flaky(ConcurrentTransactionException(message="[DELTA_CONCURRENT_TRANSACTION] same app id"))
    assert retry_conflicts(action, "orders batch 8: MERGE", sleep=lambda s: None) == "committed"
    assert action.calls == 2
    classic = Flaky(ClassicConcurrentTransaction(message="same app id"))
    with pytest.raises(ClassicConcurrentTransaction):
        retry_conflicts(classic, "x", sleep=lambda s: None)
