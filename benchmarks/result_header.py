"""What a result file opens with, for the benchmarks that write their own: what ran, at which
commit, on which machine and packages, the load average before and after, and the wall time.

    header = ResultHeader.begin(commit)       # before any work: the load it started under
    ...                                        # the runs
    result = {**header.finish("what it measures", issue, note, packages), ...}
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks.machine import machine_info, package_version


@dataclass
class ResultHeader:
    commit: str | None
    load_average_before: list[float]
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    wall_start: float = field(default_factory=time.monotonic)

    @classmethod
    def begin(cls, commit: str | None) -> ResultHeader:
        return cls(commit, [round(x, 2) for x in os.getloadavg()])

    def finish(
        self, benchmark: str, issue: int, note: str, packages: tuple[str, ...]
    ) -> dict[str, Any]:
        """The header's fields, with the machine, `packages`' versions and the load now."""
        return {
            "benchmark": benchmark,
            "issue": issue,
            "started": self.started,
            "note": note,
            "commit": self.commit,
            "machine": machine_info(),
            "versions": {package: package_version(package) for package in packages},
            "load_average_before": self.load_average_before,
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "wall_s": round(time.monotonic() - self.wall_start, 1),
        }
