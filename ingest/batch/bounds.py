"""The MERGE's literal bounds, from the batch summary's rows: the smallest and largest uid,
and with `dedup_horizon` the earliest and latest instant. They prune the target to the files
that can hold a match (`merge.condition`); a bound that could be wrong would lose a match,
so a record without the horizon column gives no horizon bound at all."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def merge_bounds(rows, with_horizon: bool) -> dict[str, str]:
    """The uid bounds (and, with a horizon, its time bounds) over the summary's rows."""
    bounds = {}
    uids_min = [r.uid_min for r in rows if r.uid_min is not None]
    if uids_min:
        bounds["uid_min"] = min(uids_min)
        bounds["uid_max"] = max(r.uid_max for r in rows if r.uid_max is not None)
    # A record without the horizon column could match a target row anywhere: no bound then.
    if with_horizon and not any(r.null_horizon for r in rows):
        lows = [r.lo for r in rows if r.lo is not None]
        if lows:
            bounds["horizon_lo"] = utc_literal(min(lows))
            bounds["horizon_hi"] = utc_literal(max(r.hi for r in rows if r.hi is not None))
    return bounds


def utc_literal(micros: int) -> str:
    """An instant as text Spark's TIMESTAMP literal reads back exactly, whatever the
    session time zone: UTC with an explicit `Z`."""
    instant = _EPOCH + timedelta(microseconds=micros)
    return instant.strftime("%Y-%m-%d %H:%M:%S.%f") + "Z"
