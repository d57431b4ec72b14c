"""A batch's commits: the idempotent txn id and the offsets each commit carries
(`ledger`), the batch's place in the stream that the txn id and the replay checks
come from (`position`), the one place a Delta write conflict is retried (`conflicts`), and the
test-only crash points between the commits (`faults`).

No Spark at import, and nothing imported here: `plan` reads `ledger.app_id` and
`run` arms `faults` before any session exists. Imports `batch.staged` and
`batch.formats` at most inside `batch/`.
"""
