"""`ingest demo`: the whole story on an embedded broker (ingest/demo.py runs it),
and the table of counts it ends with."""

from __future__ import annotations

import sys

from ingest.cli.options import positive_int
from ingest.cli.output import CHECK_FAILED, INTERRUPTED, OK, audit_figure

NEEDS_SPARK = True


def add(commands, parents) -> None:
    command = commands.add_parser(
        "demo", parents=parents, help="the whole story on an embedded broker, in a few minutes",
        description="Start an embedded Kafka broker, produce sample orders with producer retries, "
        "an aborted transaction and malformed records, run pipelines/orders.yaml with a crash "
        "and a restart in the middle, then audit the tables. Exit 1 if a count is not exact.")
    command.add_argument("--data-root", default=None, metavar="DIR",
                         help="DATA_ROOT, where the tables go; only the folders a previous demo made "
                         "there are emptied first (default: ./.ingest/data, as conf/local.yaml)")
    command.add_argument("--pipeline", default=None, metavar="FILE",
                         help="the pipeline to run (default: pipelines/orders.yaml)")
    command.add_argument("--orders", type=positive_int, default=400, help="sample orders (default: 400)")
    command.add_argument("--max-offsets", type=positive_int, default=200, metavar="N",
                         help="offsets per batch, so there are several (default: 200)")


def run(args) -> int:
    from pathlib import Path

    from ingest import demo

    options = demo.DemoOptions(Path(args.data_root) if args.data_root else demo.DEFAULT_ROOT,
                               Path(args.pipeline) if args.pipeline else None,
                               args.orders, args.max_offsets, env=args.env, conf_dir=args.conf_dir)
    try:
        report = demo.run_demo(options, say=lambda text: print(text, flush=True))
    except KeyboardInterrupt:
        print("interrupted: the broker is stopped; the tables so far stay in the data folder",
              file=sys.stderr)
        return INTERRUPTED
    print(render_demo_report(report))
    return OK if report.ok else CHECK_FAILED


def render_demo_report(report) -> str:
    s, c, a, where = report.sample, report.counts, report.audit, report.locations
    stages = ", ".join(f"{stage} {count}" for stage, count in sorted(c.dead_letters_by_stage.items()))
    rows = [
        ("records produced", s.produced, f"{s.orders} orders, {s.retries} producer retries, "
                                         f"{s.expected_dead_letters} malformed"),
        ("aborted transaction", s.aborted, "never visible to read_committed"),
        ("unique uids", s.orders, "what the target must hold"),
        ("rows in the target", c.target_rows, f"{c.unique_uids} distinct uids"),
        ("dead letters", c.dead_letters, stages),
        ("duplicates", audit_figure(a.duplicates), "ingest.audit.verify"),
        ("missing", audit_figure(a.missing), "ingest.audit.verify"),
        ("unaccounted offsets", audit_figure(a.unaccounted), "ingest.audit.verify"),
    ]
    lines = ["", f"{'':2}{'':22}{'count':>7}"]
    lines += [f"  {name:<22}{value:>7}  {note}" for name, value, note in rows]
    lines += [f"  note: {note}" for note in a.notes]
    verdict = "exactly once: every uid once, nothing missing" if report.ok else "NOT EXACT: see above"
    lines += ["", f"{verdict} ({report.seconds:.0f}s; run 1 crashed on purpose, run 2 finished)",
              f"  target table   {where.target}", f"  dead letters   {where.dead_letter}",
              f"  checkpoint     {where.checkpoint}", f"  sample file    {s.jsonl_file}",
              f"Explore them with the notebooks in notebooks/ (DATA_ROOT={where.data_root})."]
    return "\n".join(lines)
