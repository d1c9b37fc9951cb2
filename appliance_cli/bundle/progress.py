"""Progress reporting: core code never prints; it calls a callback the CLI renders."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ProgressEvent:
    """`start` opens an item (total bytes if known), `advance` adds bytes, `end` closes it,
    `note` is a one-line message (e.g. 'skipped: already in bundle')."""

    kind: Literal["start", "advance", "end", "note"]
    item: str
    nbytes: int = 0
    total: int | None = None
    message: str = ""


ProgressFn = Callable[[ProgressEvent], None]


def no_progress(_: ProgressEvent) -> None:
    return None
