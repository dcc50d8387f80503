"""The start-up stage recorder: the process's age from /proc, first marks kept, stages in order."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from engine.startup_stages import STAGES, StartupStages, process_age_s


def _stat_line(comm: str, start_ticks: int) -> str:
    # pid (comm) state, then fields 4..21, then field 22 (starttime), then more.
    return f"4242 ({comm}) S " + " ".join(["1"] * 18) + f" {start_ticks} 0 0 0\n"


def test_the_process_age_is_read_from_the_start_time_after_a_comm_with_spaces_and_parens(
    tmp_path: Path,
) -> None:
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    started = time.clock_gettime(time.CLOCK_BOOTTIME) - 5.0
    stat = tmp_path / "stat"
    stat.write_text(_stat_line("py (x) y", int(started * ticks_per_s)))

    age = process_age_s(str(stat))

    assert age is not None and 4.9 < age < 6.0


def test_an_unreadable_stat_file_gives_no_age(tmp_path: Path) -> None:
    assert process_age_s(str(tmp_path / "missing")) is None
    (tmp_path / "garbled").write_text("4242 (x) S 1 2\n")
    assert process_age_s(str(tmp_path / "garbled")) is None


def test_this_process_started_before_its_recorder() -> None:
    stages = StartupStages.of_this_process()
    assert stages.process_start_time <= time.time()
    assert stages.seconds() == {"process_start": 0.0}


def test_each_stage_keeps_its_first_mark_and_stages_come_in_their_order() -> None:
    stages = StartupStages.of_this_process()
    stages.mark("ready")
    first_ready = stages.seconds()["ready"]
    stages.mark("weights_loaded")
    stages.mark("ready")

    seconds = stages.seconds()

    assert list(seconds) == ["process_start", "weights_loaded", "ready"]
    assert seconds["ready"] == first_ready
    assert list(seconds) == [s for s in STAGES if s in seconds]


def test_an_unknown_stage_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="weights_warmed"):
        StartupStages.of_this_process().mark("weights_warmed")


def test_the_report_carries_the_start_time_and_the_stages() -> None:
    stages = StartupStages.of_this_process()
    stages.mark("imports_done")

    report = stages.report()

    assert set(report) == {"process_start_time", "stages"}
    assert report["stages"] == stages.seconds()
