"""`make soak`: one continuous `ingest run` for a long time, to see what no short test shows.

A steady produce rate into a real broker, a batch every few seconds into a real Delta table,
first with no fault (the phase whose thirds are compared: memory and batch time of its last
third against its middle third), then a phase of SIGKILLs of the run, restarted as a
scheduler would, and a broker restart; then `ingest verify` and an exact count of the uids.

`run` drives it, `workload` is what it drives (the producer, the pipeline, the run's
processes), `memory` samples the run's processes and its JVM, `analysis` turns the samples
into the figures (no I/O, unit-tested), `folders` counts the files left at the end.
"""
