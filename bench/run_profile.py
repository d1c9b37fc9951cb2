#!/usr/bin/env python3
"""Where one `appliance` run spent its time, from ansible-runner's job events.

    bench/run_profile.py RUN_DIR [--top N]

RUN_DIR is a run's directory under the site's runs/ (it holds artifacts/<ident>/job_events/).
Each task's time is its first start to its last end over the nodes (the nodes run it at once);
the table lists the N slowest tasks, then the time by role and the run's task count. This reads
what a finished run left behind: it changes nothing and runs nothing."""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path


def _when(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp).timestamp() if stamp else None


def task_spans(run_dir: Path) -> list[tuple[str, str, float]]:
    """(role, task, seconds) for each task of the run, in the order the run met them."""
    spans: dict[str, list] = {}
    for f in sorted(
        run_dir.glob("artifacts/*/job_events/*.json"), key=lambda p: int(p.name.split("-", 1)[0])
    ):
        ev = json.loads(f.read_text())
        data = ev.get("event_data") or {}
        if ev.get("event") not in (
            "runner_on_ok",
            "runner_on_failed",
            "runner_on_skipped",
            "runner_on_unreachable",
        ):
            continue
        start, end = _when(data.get("start")), _when(data.get("end"))
        if start is None or end is None:
            continue
        key = data.get("task_uuid") or f"{data.get('play')}/{data.get('task')}"
        span = spans.setdefault(key, [data.get("role") or "(play)", data.get("task") or "?", start, end])
        span[2], span[3] = min(span[2], start), max(span[3], end)
    return [(role, task, end - start) for role, task, start, end in spans.values()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    spans = task_spans(args.run_dir)
    if not spans:
        print(f"error: {args.run_dir}: no task events under artifacts/*/job_events", file=sys.stderr)
        print("hint: name a run directory under the site's runs/", file=sys.stderr)
        return 2
    print(f"{'seconds':>8}  {'role':<20} task")
    for role, task, secs in sorted(spans, key=lambda s: -s[2])[: args.top]:
        print(f"{secs:8.1f}  {role:<20} {task}")
    by_role: dict[str, list[float]] = defaultdict(list)
    for role, _task, secs in spans:
        by_role[role].append(secs)
    print(f"\n{'seconds':>8}  {'tasks':>5}  role")
    for role, times in sorted(by_role.items(), key=lambda kv: -sum(kv[1])):
        print(f"{sum(times):8.1f}  {len(times):5d}  {role}")
    print(f"\n{sum(s for *_, s in spans):8.1f}  {len(spans):5d}  all tasks (sum of their spans)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
