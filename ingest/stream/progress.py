"""How far a run that started behind has caught up: percent, rate, time left."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ingest.kafka.offsets import Offsets

# Below this many records behind, a run is not "far behind": no progress shown.
FAR_BEHIND = 10_000


@dataclass
class CatchUp:
    pipeline: str
    start: Offsets  # position when the run began
    goal: Offsets  # end offsets when the run began
    began: float = field(default_factory=time.monotonic)
    reached: Offsets = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(max(0, end - self._from(t, p)) for t, parts in self.goal.items() for p, end in parts.items())

    @property
    def far_behind(self) -> bool:
        return self.total >= FAR_BEHIND

    def _from(self, topic: str, partition: int) -> int:
        return max(0, self.start.get(topic, {}).get(partition, 0))

    def advance(self, end_offsets: Offsets) -> None:
        for topic, parts in end_offsets.items():
            known = self.reached.setdefault(topic, {})
            for partition, offset in parts.items():
                known[partition] = max(known.get(partition, 0), offset)

    @property
    def done(self) -> int:
        count = 0
        for topic, parts in self.goal.items():
            for partition, end in parts.items():
                at = min(end, self.reached.get(topic, {}).get(partition, self._from(topic, partition)))
                count += max(0, at - self._from(topic, partition))
        return count

    def line(self, width: int = 30) -> str:
        total, done = self.total, self.done
        fraction = done / total if total else 1.0
        elapsed = max(time.monotonic() - self.began, 1e-6)
        rate = done / elapsed
        left = (total - done) / rate if rate > 0 else float("inf")
        filled = int(fraction * width)
        bar = "#" * filled + "." * (width - filled)
        eta = f"{left:,.0f}s left" if left != float("inf") else "time left unknown"
        return (f"{self.pipeline} [{bar}] {fraction:6.1%} {done:,}/{total:,} records, "
                f"{rate:,.0f} rec/s, {eta}")
