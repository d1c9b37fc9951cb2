"""Terminal output: one Console for results (stdout) and one for diagnostics (stderr)."""

from __future__ import annotations

import os
import sys

from rich.console import Console

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def interactive() -> bool:
    """Live progress only on a terminal; CI and pipes get plain, line-oriented output."""
    return sys.stdout.isatty() and not os.environ.get("CI")


def error(message: str, hint: str | None = None) -> None:
    err.print(f"[bold red]error:[/] {message}", markup=True, highlight=False)
    if hint:
        err.print(f"[yellow]hint:[/] {hint}", markup=True, highlight=False)


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {message}", markup=True, highlight=False)


def info(message: str) -> None:
    out.print(message, markup=False, highlight=False)


def count(n: int, noun: str) -> str:
    """'1 node', '4 nodes'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
