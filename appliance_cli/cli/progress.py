"""Renders domain events while a playbook runs: a live panel on a terminal, plain lines otherwise."""

from __future__ import annotations

import time
from collections import Counter

from rich.live import Live
from rich.table import Table
from rich.text import Text

from appliance_cli.cli import ui
from appliance_cli.runner.events import Event, HostResult, HostWarning, PlayStarted, RunResult, TaskStarted

_STYLE = {
    "ok": "green",
    "changed": "yellow",
    "failed": "bold red",
    "unreachable": "bold red",
    "skipped": "dim",
}


class Progress:
    def __init__(self, title: str, live: bool | None = None):
        self.title = title
        self.live_enabled = ui.interactive() if live is None else live
        self.t0 = time.monotonic()
        self.task = ""
        self.play = ""
        self.hosts: dict[str, Counter] = {}
        self.tasks_done = 0
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
        elif isinstance(ev, HostWarning):
            self._line(f"  WARNING {ev.host}: {ev.message}", style="yellow", always=True)
        if self._live is not None:
            self._live.update(self._render())

    def _line(self, text: str, style: str | None = None, always: bool = False) -> None:
        if self._live is not None and not always:
            return
        line = Text(f"[{self.elapsed()}] ", style="dim") + Text(text, style=style or "")
        (self._live.console if self._live else ui.out).print(line)

    def _render(self) -> Table:
        t = Table.grid(padding=(0, 2))
        t.add_row(Text(f"{self.title} — {self.elapsed()}", style="bold"), Text(self.play, style="dim"))
        t.add_row(Text("task", style="dim"), Text(self.task))
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
        table.add_row(host, str(s.ok), str(s.changed), str(s.failed), str(s.unreachable), str(s.skipped))
    ui.out.print(table)
    # A stable, grep-able line for scripts and tests: one per host.
    for host, s in sorted(result.stats.items()):
        ui.info(
            f"RECAP {host} ok={s.ok} changed={s.changed} failed={s.failed} "
            f"unreachable={s.unreachable} skipped={s.skipped}"
        )
    for w in result.warnings:
        ui.warn(f"{w.host}: {w.message}")
