"""bench/run_profile.py reads a run's job events as ansible-runner writes them: a task's time is
its first start to its last end over the nodes, summed by role."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "run_profile.py"


def _event(d: Path, counter: int, event: str, **data: object) -> None:
    (d / f"{counter}-{counter:08x}.json").write_text(
        json.dumps({"counter": counter, "event": event, "event_data": data})
    )


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)


def test_a_task_spans_its_nodes_and_roles_sum_their_tasks(tmp_path: Path) -> None:
    events = tmp_path / "artifacts" / "ident" / "job_events"
    events.mkdir(parents=True)
    t = "2026-11-27T09:00:{:02d}.000000+00:00".format
    _event(events, 1, "playbook_on_task_start", task="Seed | Lay the images", role="registry", task_uuid="a")
    _event(events, 2, "runner_on_ok", task="Seed | Lay the images", role="registry", task_uuid="a",
           host="master1", start=t(0), end=t(4))  # fmt: skip
    _event(events, 3, "runner_on_ok", task="Seed | Lay the images", role="registry", task_uuid="a",
           host="worker1", start=t(1), end=t(7))  # fmt: skip
    _event(events, 4, "runner_on_skipped", task="Apt | Update", role="os_prereqs", task_uuid="b",
           host="master1", start=t(10), end=t(11))  # fmt: skip
    _event(events, 10, "runner_on_failed", task="Registry | Check", role="registry", task_uuid="c",
           host="master1", start=t(20), end=t(22))  # fmt: skip
    r = _run(str(tmp_path), "--top", "2")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    # the slowest two tasks: the seed from master1's start to worker1's end, then the check
    assert lines[1].split() == ["7.0", "registry", "Seed", "|", "Lay", "the", "images"]
    assert lines[2].split() == ["2.0", "registry", "Registry", "|", "Check"]
    assert "Apt | Update" not in "\n".join(lines[:3])
    by_role = {ln.split()[-1]: ln.split()[:2] for ln in lines[5:7]}
    assert by_role == {"registry": ["9.0", "2"], "os_prereqs": ["1.0", "1"]}
    assert lines[-1].split()[:2] == ["10.0", "3"]


def test_a_directory_without_events_is_one_line_and_exit_2(tmp_path: Path) -> None:
    r = _run(str(tmp_path))
    assert r.returncode == 2
    assert r.stderr.splitlines()[0] == f"error: {tmp_path}: no task events under artifacts/*/job_events"
    assert r.stderr.splitlines()[1].startswith("hint: ")
