"""ingest's benchmarks, side by side with what users would otherwise run (README.md: the method).

Run from the repository's root as `python -m bench.studies.<study>` or through
`bench/run [STUDY] ARGS`. `harness/` holds what the studies share (the data, the
legs, the meter, the report), `studies/` one module per question, `profiles/`
where a batch's time goes, `results/` what the runs wrote.
"""

from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"
