"""The install's progress rendering: warnings grouped across nodes and shown once, the overall
progress line with an ETA from the previous run's timings."""

from __future__ import annotations

import json
from pathlib import Path

from appliance_cli.cli.progress import Progress, group_warnings, load_timings
from appliance_cli.runner.events import HostWarning, PlayStarted, TaskStarted

SYSCTL = "sysctl fs.inotify.max_user_watches=524288 cannot be set in a container node (read-only /proc/sys)"


def test_identical_warnings_from_several_nodes_are_one_line() -> None:
    ws = [HostWarning(h, SYSCTL) for h in ("worker2", "master1", "worker1", "worker3")]
    ws += [HostWarning("master1", "only here"), HostWarning("worker2", SYSCTL)]  # a repeat counts once
    assert group_warnings(ws) == [
        f"4 nodes (master1, worker1, worker2, worker3): {SYSCTL}",
        "master1: only here",
    ]


def test_warnings_are_not_printed_during_the_run(capsys) -> None:
    with Progress("install t", live=False) as p:
        p(HostWarning("master1", SYSCTL))
    assert SYSCTL not in capsys.readouterr().out and p.warnings == 1


def test_progress_line_without_and_with_previous_timings(tmp_path: Path) -> None:
    p = Progress("install t", live=False, timings=tmp_path / "t.json")
    p(PlayStarted("OS"))
    p(TaskStarted("a"))
    assert p.overall() == "phase 1 · task 1"
    p.save_timings()
    assert json.loads((tmp_path / "t.json").read_text())["plays"] == 1

    (tmp_path / "t.json").write_text(json.dumps({"plays": 5, "tasks": 127, "seconds": 3600}))
    q = Progress("install t", live=False, timings=tmp_path / "t.json")
    q(PlayStarted("OS"))
    q(TaskStarted("a"))
    line = q.overall()
    assert line.startswith("phase 1/5 · task 1/127 · ETA ") and line.endswith("s")
    assert 3590 <= int(line.rsplit("ETA ", 1)[1][:-1]) <= 3600


def test_unreadable_timings_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text("{not json")
    assert load_timings(tmp_path / "t.json") is None and load_timings(tmp_path / "missing.json") is None
    (tmp_path / "t.json").write_text(json.dumps({"plays": "x"}))
    assert load_timings(tmp_path / "t.json") is None
