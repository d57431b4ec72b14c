"""One module per question, each run as `python -m bench.studies.<study>` (or `bench/run STUDY`).

`suite` is the side-by-side run (`bench/run`); first_commit, fixed_cost, latency,
history and merge_scale are its parts (R4, L1, LAT, G1, R2). The others stand alone:
batch_settings, cdc_merge, connect, formats, many_topics, small_files.
"""
