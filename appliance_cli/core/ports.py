"""What the core services need from the outside world, as protocols (fakes in unit tests)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from appliance_cli.runner.events import Event, RunRequest, RunResult


class RunnerPort(Protocol):
    def run(self, req: RunRequest, on_event: Callable[[Event], None]) -> RunResult: ...
