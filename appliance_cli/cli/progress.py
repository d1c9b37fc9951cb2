"""Renders domain events while a playbook runs: a live panel on a terminal, plain lines otherwise.
The panel says how far the run is (phase n of N, tasks done) with an ETA taken from the previous
run's timings, which each run keeps under the site's runs/ directory."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from rich.live import Live
from rich.table import Table
from rich.text import Text

from appliance_cli.cli import ui
from appliance_cli.fsutil import atomic_write
from appliance_cli.runner.events import Event, HostResult, HostWarning, PlayStarted, RunResult, TaskStarted

_STYLE = {
    "ok": "green",
    "changed": "yellow",
    "failed": "bold red",
    "unreachable": "bold red",
    "skipped": "dim",
}


TIMINGS_FILE = "last-install-timings.json"


class Progress:
    def __init__(self, title: str, live: bool | None = None, timings: Path | None = None):
        self.title = title
        self.live_enabled = ui.interactive() if live is None else live
        self.t0 = time.monotonic()
        self.task = ""
        self.play = ""
        self.plays: list[str] = []
        self.hosts: dict[str, Counter] = {}
        self.tasks_done = 0
        self.warnings = 0
        self.timings = timings
        self.previous = load_timings(timings)
        self._live: Live | None = None

    def __enter__(self) -> Progress:
        if self.live_enabled:
            self._live = Live(self._render(), console=ui.out, refresh_per_second=4, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.t0:6.1f}s"

    def __call__(self, ev: Event) -> None:
        if isinstance(ev, PlayStarted):
            self.play = ev.name
            self.plays.append(ev.name)
            self._line(f"PLAY {ev.name}")
        elif isinstance(ev, TaskStarted):
            self.task = ev.name
            self.tasks_done += 1
            self._line(ev.name)
        elif isinstance(ev, HostResult):
            self.hosts.setdefault(ev.host, Counter())[ev.status] += 1
            if ev.status in ("failed", "unreachable") and not ev.ignored:
                self._line(f"  {ev.status.upper()} {ev.host}: {ev.message}", style="bold red", always=True)
            elif ev.status == "changed":
                self._line(f"  changed: {ev.host}", style="yellow")
        elif isinstance(ev, HostWarning):  # shown once at the end, grouped across nodes
            self.warnings += 1
        if self._live is not None:
            self._live.update(self._render())

    def _line(self, text: str, style: str | None = None, always: bool = False) -> None:
        if self._live is not None and not always:
            return
        line = Text(f"[{self.elapsed()}] ", style="dim") + Text(ui.visible(text), style=style or "")
        (self._live.console if self._live else ui.out).print(line)

    def overall(self) -> str:
        """'phase 3/5 · task 42/127 · ETA 35s' (the totals and ETA from the previous run, if any)."""
        prev = self.previous
        phases = f"phase {len(self.plays)}" + (f"/{prev['plays']}" if prev else "")
        tasks = f"task {self.tasks_done}" + (f"/{prev['tasks']}" if prev else "")
        parts = [phases, tasks]
        if prev and prev["seconds"] > 0:
            left = prev["seconds"] - (time.monotonic() - self.t0)
            parts.append(f"ETA {left:.0f}s" if left > 0 else "ETA: past the previous run's time")
        if self.warnings:
            parts.append(f"{self.warnings} warnings (listed at the end)")
        return " · ".join(parts)

    def save_timings(self) -> None:
        """Keep this run's shape and duration for the next run's ETA."""
        if self.timings is None or not self.plays:
            return
        record = {
            "plays": len(self.plays),
            "tasks": self.tasks_done,
            "seconds": round(time.monotonic() - self.t0, 1),
        }
        self.timings.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.timings, json.dumps(record) + "\n")

    def _render(self) -> Table:
        t = Table.grid(padding=(0, 2))
        t.add_row(
            Text(f"{self.title} — {self.elapsed()}", style="bold"),
            Text(ui.visible(self.play, lines=False), style="dim"),
        )
        t.add_row(Text("progress", style="dim"), Text(self.overall()))
        t.add_row(Text("task", style="dim"), ui.cell(self.task))
        for host, c in sorted(self.hosts.items()):
            parts = Text()
            for status in ("ok", "changed", "failed", "unreachable", "skipped"):
                if c[status]:
                    parts += Text(f"{status}={c[status]} ", style=_STYLE[status])
            t.add_row(Text(host), parts)
        return t


def print_recap(result: RunResult) -> None:
    table = Table(
        title=f"recap ({result.elapsed:.1f}s, artifacts: {result.artifact_dir})", title_justify="left"
    )
    for col in ("host", "ok", "changed", "failed", "unreachable", "skipped"):
        table.add_column(col, justify="left" if col == "host" else "right")
    for host, s in sorted(result.stats.items()):
        table.add_row(
            ui.cell(host), str(s.ok), str(s.changed), str(s.failed), str(s.unreachable), str(s.skipped)
        )
    ui.out.print(table)
    # A stable, grep-able line for scripts and tests: one per host.
    for host, s in sorted(result.stats.items()):
        ui.info(
            f"RECAP {host} ok={s.ok} changed={s.changed} failed={s.failed} "
            f"unreachable={s.unreachable} skipped={s.skipped}"
        )
    for line in group_warnings(result.warnings):
        ui.warn(line)


def load_timings(path: Path | None) -> dict[str, float] | None:
    try:
        data = json.loads(path.read_text()) if path else None
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not all(
        isinstance(data.get(k), int | float) for k in ("plays", "tasks", "seconds")
    ):
        return None
    return data


def group_warnings(warnings: list[HostWarning]) -> list[str]:
    """One line per distinct message, naming the nodes it came from, in first-seen order:
    'master1: …' for one node, '4 nodes (master1, worker1, worker2, worker3): …' for several."""
    nodes: dict[str, list[str]] = {}
    for w in warnings:
        hosts = nodes.setdefault(w.message, [])
        if w.host not in hosts:
            hosts.append(w.host)
    return [
        f"{hosts[0]}: {msg}" if len(hosts) == 1 else f"{len(hosts)} nodes ({', '.join(sorted(hosts))}): {msg}"
        for msg, hosts in nodes.items()
    ]
