"""The MERGE of a batch into its target, one module per target mode.

`mode.merge` chooses the mode from the spec and `mode.merge_text` says it in
words for `plan`; `upsert` (insert_only and upsert), `changes` (cdc with deletes),
`tombstones` (a key's null value deletes it) and `history` (SCD2 versions) each
build their MERGE on `target` (the target's rows and creation), `condition` (the
ON clause, bounded to the batch's partitions) and `clauses` (the WHEN clauses,
written once for the run and for `plan`); hard deletes go through `delete_log`.
`dead_letters` is a MERGE on Kafka coordinates into the dead-letter table.
Nothing is imported here: `plan` loads `condition` without Spark.
"""
