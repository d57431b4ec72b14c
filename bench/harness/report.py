"""Ratios from the runs, the stdout table, the README figures and the plot.

Every ratio is taken within one repetition (its two runs ran minutes apart at
most, in alternating order), then the median over repetitions is reported with
the per-repetition values beside it.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

TARGETS = {
    "R1": (">=", 0.85, "throughput of ingest / plain append to Delta"),
    "R2": ("<=", 1.2, "one MERGE batch into the large table / into an empty table (UUIDv7, bounded)"),
    "R3": (">=", 0.35, "throughput of ingest / Spark Kafka source into no-op"),
    "R4": ("<=", 1.5, "time to first commit of `ingest run` / bare session + one Delta write"),
    "L1": ("<=", 1.5, "median batch time at 500 records per batch, ingest / plain append"),
    "P1": (">=", 1.0, "throughput of ingest / the Spark peer (dropDuplicatesWithinWatermark, Delta append)"),
    "J1": ("<=", 4, "Spark jobs a 500-record batch of ingest waits for, no dead letters (a count, not a ratio)"),
    "J0": ("<=", 1.5, "Spark jobs a 500-record batch waits for, ingest / plain append's all"),
    "LAT": ("<=", 1.3, "p99 produce-to-visible latency, 1 s trigger, ingest / plain append"),
    "G1": ("<=", 1.2, "batch time into a table after 1,000 commits / after 10"),
    "M1": ("<=", 1.1, "peak RSS (driver JVM + Python) of ingest / plain append"),
    "M2": ("<=", 1.1, "peak JVM heap of ingest / plain append"),
}


def _median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def _per_rep_ratio(runs, key, numerator, denominator, value):
    by_rep = {}
    for run in runs:
        by_rep.setdefault(run["rep"], {})[run[key]] = value(run)
    ratios = [reps[numerator] / reps[denominator] for _, reps in sorted(by_rep.items())
              if reps.get(numerator) and reps.get(denominator)]
    return {"median": _median(ratios), "per_rep": [round(r, 3) for r in ratios]}


def _met(name: str, value) -> bool | None:
    if value is None:
        return None
    op, target, _ = TARGETS[name]
    return value >= target if op == ">=" else value <= target


def legs_summary(runs: list[dict]) -> dict:
    summary = {}
    for leg in dict.fromkeys(r["leg"] for r in runs):
        mine = [r for r in runs if r["leg"] == leg]
        records = mine[0]["records"]
        audits = [r["audit"] for r in mine if "audit" in r]
        files = [f for r in mine for f in r.get("files_scanned_per_batch", []) if f is not None]
        summary[leg] = {
            "records": records,
            "seconds": _median([r["seconds"] for r in mine]),
            "records_per_second": _median([r["records_per_second"] for r in mine]),
            "cpu_seconds_per_million": _median([r["cpu_seconds_per_million"] for r in mine]),
            "rss_peak_mb": max(r["rss_peak_mb"] for r in mine),
            "heap_peak_mb": max((r["heap_peak_mb"] or 0) for r in mine) or None,
            "files_scanned_per_batch": _median(files),
            "jobs_per_batch": _median([r.get("jobs_per_batch") for r in mine]),
            "background_jobs_per_batch": _median([r.get("background_jobs_per_batch") for r in mine]),
            "duplicate_uids": max((a["duplicate_uids"] for a in audits), default=None),
            "missing_uids": max((a["missing_uids"] for a in audits), default=None),
        }
    return summary


def _r2_pairs(runs: list[dict], leg: str, value) -> dict:
    pairs = [r for r in runs if r["leg"] == leg and r["into"] in ("large", "empty")]
    return _per_rep_ratio(pairs, "into", "large", "empty", value)


def r2_summary(r2: dict) -> dict:
    runs = r2["runs"]
    summary = {}
    for leg in dict.fromkeys(r["leg"] for r in runs):
        mine = [r for r in runs if r["leg"] == leg]
        summary[leg] = {
            "batch_ratio": _r2_pairs(runs, leg, lambda r: r["batch_seconds"]),
            "merge_ratio": _r2_pairs(runs, leg, lambda r: r["merge_seconds"]),
            **{f"{into}_{what}": _median([r[what] for r in mine if r["into"] == into])
               for into in ("large", "empty") for what in ("batch_seconds", "merge_seconds", "files_scanned")},
            "files_in_large_table": _median([r["files_in_table"] for r in mine if r["into"] == "large"]),
            "audit": next((r["audit"] for r in mine if r.get("audit") and r["into"] == "large"), None),
        }
    return summary


def _j0_jobs(run: dict):
    """J0's side of a run: ingest's jobs its batches wait for, the plain append's all (it has
    no background thread; a Delta checkpoint it writes is in its batch)."""
    if run["leg"] == "ingest":
        return run["jobs_per_batch"]
    return (run["jobs_per_batch"] or 0) + (run.get("background_jobs_per_batch") or 0)


def ratios(results: dict) -> dict:
    found = {}
    legs = results.get("legs", {}).get("runs", [])
    if legs:
        throughput = lambda r: r["records_per_second"]  # noqa: E731
        found["R1"] = _per_rep_ratio(legs, "leg", "ingest", "plain_append", throughput)
        found["R3"] = _per_rep_ratio(legs, "leg", "ingest", "spark_noop", throughput)
        found["naive_vs_plain_append"] = _per_rep_ratio(legs, "leg", "ingest_naive", "plain_append", throughput)
        found["P1"] = _per_rep_ratio(legs, "leg", "ingest", "spark_dedup", throughput)
        found["M1"] = _per_rep_ratio(legs, "leg", "ingest", "plain_append", lambda r: r["rss_peak_mb"])
        found["M2"] = _per_rep_ratio(legs, "leg", "ingest", "plain_append", lambda r: r["heap_peak_mb"])
    l1 = (results.get("l1") or {}).get("runs", [])
    if l1:
        found["L1"] = _per_rep_ratio(l1, "leg", "ingest", "plain_append", lambda r: r["median_batch_ms"])
        found["J0"] = _per_rep_ratio(l1, "leg", "ingest", "plain_append", _j0_jobs)
        jobs = [r["jobs_per_batch"] for r in l1 if r["leg"] == "ingest"]
        found["J1"] = {"median": _median(jobs), "per_rep": jobs}
    lat = (results.get("latency") or {}).get("runs", [])
    if lat:
        found["LAT"] = _per_rep_ratio(lat, "leg", "ingest", "plain_append", lambda r: r["p99_ms"])
        found["LAT_without_checkpoints"] = _per_rep_ratio(lat, "leg", "ingest", "plain_append",
                                                          lambda r: r.get("p99_without_checkpoints_ms"))
    g1 = (results.get("g1") or {}).get("runs", [])
    if g1:
        found["G1"] = _per_rep_ratio(g1, "commits", 1000, 10, lambda r: r["batch_ms"])
    if results.get("r2"):
        found["R2"] = _r2_pairs(results["r2"]["runs"], "v7_bounded", lambda r: r["batch_seconds"])
    if results.get("r4"):
        found["R4"] = _per_rep_ratio(results["r4"], "side", "ingest_run", "bare_session_write",
                                     lambda r: r["first_commit_seconds"])
    for name in TARGETS:
        if name in found:
            op, target, what = TARGETS[name]
            found[name].update({"target": f"{op} {target}", "what": what, "met": _met(name, found[name]["median"])})
    return found


# --- text ----------------------------------------------------------------------------


def _fmt(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return lines


def ratio_lines(summary: dict) -> list[str]:
    rows = []
    for name in TARGETS:
        ratio = summary["ratios"].get(name)
        if ratio:
            verdict = {True: "met", False: "missed", None: "-"}[ratio["met"]]
            rows.append([name, ratio["what"], ratio["median"], ", ".join(f"{v:.2f}" for v in ratio["per_rep"]),
                         ratio["target"], verdict])
    return _table(["ratio", "what", "median", "per repetition", "target", ""], rows)


def leg_lines(summary: dict) -> list[str]:
    rows = [[leg, s["records"], s["seconds"], round(s["records_per_second"] or 0), s["cpu_seconds_per_million"],
             round(s["rss_peak_mb"]), round(s["heap_peak_mb"]) if s["heap_peak_mb"] else None,
             s["files_scanned_per_batch"], s.get("jobs_per_batch"), s.get("background_jobs_per_batch"),
             _dup_missing(s)]
            for leg, s in summary.get("legs", {}).items()]
    return _table(["leg", "records", "median s", "records/s", "CPU-s per M records", "peak RSS MB",
                   "peak heap MB", "files scanned per batch", "jobs per batch", "background jobs per batch",
                   "duplicate / missing uids"], rows)


def l1_lines(results: dict) -> list[str]:
    runs = (results.get("l1") or {}).get("runs", [])
    rows = []
    for leg in dict.fromkeys(r["leg"] for r in runs):
        mine = [r for r in runs if r["leg"] == leg]
        rows.append([leg, _median([r["batches"] for r in mine]), _median([r["median_batch_ms"] for r in mine]),
                     ", ".join(f"{r['median_batch_ms']:.0f}" for r in mine),
                     _median([r["p90_batch_ms"] for r in mine]), _median([r["jobs_per_batch"] for r in mine]),
                     _median([r.get("background_jobs_per_batch") for r in mine]),
                     max(r["audit"]["duplicate_uids"] for r in mine)])
    return _table(["leg", "batches", "median batch ms", "per repetition", "p90 batch ms", "jobs per batch",
                   "background jobs per batch", "duplicate uids"], rows)


def p1_duplicate_lines(results: dict, summary: dict) -> list[str]:
    """What P1's peer lets through that ingest does not: the topic's late retries."""
    late = results.get("data", {}).get("late_retries")
    legs = summary.get("legs", {})
    if not late or "spark_dedup" not in legs or "ingest" not in legs:
        return []
    return [f"P1's data holds {late} late retries (a uid sent again with a `ts` over "
            f"the peer's watermark delay after its original): duplicate uids landed by spark_dedup "
            f"{_fmt(legs['spark_dedup']['duplicate_uids'])}, by ingest {_fmt(legs['ingest']['duplicate_uids'])}.", ""]


def _dup_missing(s: dict) -> str:
    if s.get("duplicate_uids") is None:
        return "-"
    return f"{s['duplicate_uids']:,} / {s['missing_uids']:,}"


def latency_lines(results: dict) -> list[str]:
    lat = results["latency"]
    rows = []
    for leg in dict.fromkeys(r["leg"] for r in lat["runs"]):
        mine = [r for r in lat["runs"] if r["leg"] == leg]
        rows.append([leg, _median([r["p50_ms"] for r in mine]), _median([r["p99_ms"] for r in mine]),
                     ", ".join(f"{r['p99_ms']}" for r in mine),
                     _median([r.get("p99_without_checkpoints_ms") for r in mine]),
                     ", ".join(f"{r.get('checkpoint_batches', '-')} of {len(r.get('batches', []))}" for r in mine),
                     f"{sum(r['visible'] for r in mine):,} of {sum(r['sent'] for r in mine):,}"])
    lines = ([f"Latency, {lat['rate']} records/s for {lat['seconds']} s, trigger {lat['trigger']} "
              "(plot: `latency.png`, per batch on the right):", ""] +
             _table(["leg", "median p50 ms", "median p99 ms", "p99 per repetition",
                     "median p99 ms without checkpoint batches", "checkpoint batches per repetition",
                     "records visible"], rows))
    clear = ratios(results).get("LAT_without_checkpoints") or {}
    if clear.get("median") is not None:
        lines += ["", f"LAT without the batches that wrote a Delta checkpoint and the batches after them: "
                      f"{clear['median']:.2f} (per repetition {', '.join(f'{v:.2f}' for v in clear['per_rep'])})"]
    return lines


def r2_lines(summary: dict) -> list[str]:
    rows = []
    for leg, s in summary.get("r2", {}).items():
        audit = s.get("audit") or {}
        rows.append([leg, s["empty_batch_seconds"], s["large_batch_seconds"], s["batch_ratio"]["median"],
                     s["empty_merge_seconds"], s["large_merge_seconds"], s["merge_ratio"]["median"],
                     f"{_fmt(s['large_files_scanned'])} of {_fmt(s['files_in_large_table'])}",
                     f"{audit.get('duplicate_uids', '-')} / {audit.get('missing_uids', '-')}"])
    return _table(["leg", "batch s (empty)", "batch s (large)", "batch ratio", "MERGE s (empty)",
                   "MERGE s (large)", "MERGE ratio", "files scanned (large)", "dup / missing"], rows)


def r4_lines(results: dict) -> list[str]:
    runs = results.get("r4") or []
    rows = []
    for side in ("ingest_run", "bare_session_write"):
        mine = [r for r in runs if r["side"] == side]
        if mine:
            rows.append([side, _median([r["first_commit_seconds"] for r in mine]),
                         ", ".join(f"{r['first_commit_seconds']:.1f}" for r in mine),
                         _median([r["exit_seconds"] for r in mine])])
    lines = _table(["side", "median s to first commit", "per repetition", "median s to exit"], rows)
    mine = [r for r in runs if r["side"] == "ingest_run" and "query_started_seconds" in r]
    if mine:  # where `ingest run`'s start-up has got to, by the files it writes
        phases = [("query started (checkpoint `metadata`)", "query_started_seconds"),
                  ("first batch planned (`offsets/0`)", "batch_planned_seconds"),
                  ("table created (version 0)", "table_created_seconds"),
                  ("first MERGE committed (version 1)", "first_commit_seconds")]
        lines += ["", "`ingest run`'s start-up, median s from launch:", ""]
        lines += _table(["milestone", "median s"], [[name, _median([r.get(key) for r in mine])]
                                                     for name, key in phases])
    return lines


def machine_lines(machine: dict) -> list[str]:
    return [f"- machine: {machine['cpu']}, {machine['cores']} cores, {machine['memory_gb']} GB, {machine['os']}",
            f"- software: Python {machine['python']}, {machine['java']}, pyspark {machine['pyspark']}, "
            f"delta-spark {machine['delta_spark']}, confluent-kafka {machine['confluent_kafka']}",
            f"- load average (1 min) at start {machine['load_start']}, at end {machine.get('load_end', '-')} "
            "(other engineers' Spark jobs share this machine: ratios, not absolute times, are the figures)"]


def text_report(results: dict, summary: dict) -> str:
    scale = results["scale"]
    lines = [f"### `bench/run{' --quick' if scale['name'] == 'quick' else ''}`, {results['started_at']}, "
             f"{results['elapsed_seconds'] / 60:.1f} min", ""]
    lines += machine_lines(results["machine"])
    lines += [f"- data: {scale['records']:,} records of ~{results['data']['value_bytes']} bytes "
              f"({results['data']['unique']:,} unique uids, {results['data']['aborted']} in aborted "
              f"transactions), {results['data']['partitions']} partitions, max_offsets_per_trigger "
              f"{scale['max_offsets']:,}; R2 table {scale['r2_rows']:,} rows in {scale['r2_files']} files, "
              f"batch {scale['r2_batch']:,} records; {results['reps']} repetitions", ""]
    lines += ratio_lines(summary) + [""]
    if summary.get("legs"):
        lines += ["Throughput legs (median over repetitions):", ""] + leg_lines(summary) + [""]
        lines += p1_duplicate_lines(results, summary)
    for part in ("l1", "latency", "g1"):
        if (results.get(part) or {}).get("error"):
            lines += [f"{part}: not measured, {results[part]['error']}", ""]
    if (results.get("l1") or {}).get("runs"):
        lines += [f"L1, {results['l1']['batch_records']}-record batches (median over repetitions):", ""]
        lines += l1_lines(results) + [""]
    if (results.get("latency") or {}).get("runs"):
        lines += latency_lines(results) + [""]
    if (results.get("g1") or {}).get("runs"):
        g1 = results["g1"]["runs"]
        rows = [[size, _median([r["batch_ms"] for r in g1 if r["commits"] == size]),
                 ", ".join(f"{r['batch_ms']:.0f}" for r in g1 if r["commits"] == size),
                 _median([r["jobs_per_batch"] for r in g1 if r["commits"] == size])]
                for size in results["g1"]["sizes"]]
        lines += [f"G1, one {results['g1']['batch_records']}-record batch:", ""]
        lines += _table(["commits before", "median batch ms", "per repetition", "jobs"], rows) + [""]
    if summary.get("r2"):
        lines += ["R2, one batch (median over repetitions):", ""] + r2_lines(summary) + [""]
    if results.get("r4"):
        lines += ["R4:", ""] + r4_lines(results) + [""]
    if results.get("profile"):
        lines += profile_lines(results["profile"]) + [""]
    return "\n".join(lines)


def profile_lines(profile: dict) -> list[str]:
    lines = [f"Where one ingest run's time goes ({profile['records']:,} records, {profile['seconds']:.1f} s):", ""]
    driver = list(profile.get("driver_share_by_function", {}).items())[:8]
    if not profile.get("py_spy"):
        lines.append("(py-spy is not installed: `pip install -e '.[bench]'`, or `make bench`)")
    if driver:
        lines += _table(["the batch thread (py-spy), innermost `ingest` frame", "share of samples"],
                        [[k, f"{v:.0%}"] for k, v in driver])
    return lines


def summarize(results: dict) -> dict:
    return {
        "ratios": ratios(results),
        "legs": legs_summary(results["legs"]["runs"]) if results.get("legs") else {},
        "r2": r2_summary(results["r2"]) if results.get("r2") else {},
    }


def update_readme(readme: Path, block: str, section: str = "figures") -> None:
    """Replaces the README's section between `<!-- SECTION:start -->` and its end marker
    (appended when the README has none yet)."""
    start, end = f"<!-- {section}:start -->", f"<!-- {section}:end -->"
    text = readme.read_text()
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    replacement = f"{start}\n{block}\n{end}"
    readme.write_text(pattern.sub(lambda _: replacement, text) if pattern.search(text)
                      else text + "\n" + replacement + "\n")


# --- plot ----------------------------------------------------------------------------


def pyplot():
    """matplotlib's pyplot on a file backend, or None where matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw(path: Path, paint, panels: int = 1) -> bool:
    """One chart into `path`: `paint(axis)` draws it (and its labels), or with `panels` > 1,
    `paint(axes)` draws them side by side; False without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    figure, axes = plt.subplots(1, panels, figsize=(8 * panels, 5), dpi=110, squeeze=False)
    paint(axes[0][0] if panels == 1 else list(axes[0]))
    for axis in axes[0]:
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True


def plot(results: dict, path: Path) -> bool:
    """Per-batch MERGE time against table size, bounded beside naive."""
    runs = results["r2"]["runs"]
    styles = {"v7_bounded": ("tab:blue", "o", "UUIDv7, bounded MERGE"),
              "v7_naive": ("tab:red", "s", "UUIDv7, naive MERGE (bounds off)"),
              "v4_horizon": ("tab:green", "^", "UUIDv4, bounded with dedup_horizon")}

    def paint(axis) -> None:
        for leg, (color, marker, label) in styles.items():
            mine = [r for r in runs if r["leg"] == leg]
            if not mine:
                continue
            sizes = sorted({r["table_rows"] for r in mine})
            medians = [statistics.median(r["merge_seconds"] for r in mine if r["table_rows"] == s) for s in sizes]
            axis.scatter([r["table_rows"] / 1e6 for r in mine], [r["merge_seconds"] for r in mine],
                         color=color, marker=marker, alpha=0.35)
            axis.plot([s / 1e6 for s in sizes], medians, color=color, marker=marker, label=label)
        scale = results["scale"]
        axis.set_xlabel("target table size before the batch (million rows)")
        axis.set_ylabel("MERGE time of one batch (s, Delta executionTimeMs)")
        axis.set_title(f"One batch of {scale['r2_batch']:,} records ({scale['name']} run)")
        axis.set_ylim(bottom=0)

    return draw(path, paint)
