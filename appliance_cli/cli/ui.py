"""Terminal output: one Console for results (stdout) and one for diagnostics (stderr)."""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.markup import escape

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def interactive() -> bool:
    """Live progress only on a terminal; CI and pipes get plain, line-oriented output."""
    return sys.stdout.isatty() and not os.environ.get("CI")


# Messages carry the tools' own words, brackets included ("[ERROR CRI]", "Error: [a and b ...]"):
# escaped, so rich never takes them for markup and drops them.
def error(message: str, hint: str | None = None) -> None:
    err.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False)
    if hint:
        show_hint(hint)


def show_hint(message: str) -> None:
    err.print(f"[yellow]hint:[/] {escape(message)}", markup=True, highlight=False)


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(message)}", markup=True, highlight=False)


def info(message: str) -> None:
    out.print(message, markup=False, highlight=False)


def count(n: int, noun: str) -> str:
    """'1 node', '4 nodes'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def confirm(question: str, what: str) -> None:
    """Ask on the terminal; without one, refuse (the caller's --yes is the way round)."""
    from appliance_cli.errors import Cancelled, UsageError

    if not sys.stdin.isatty():
        raise UsageError(f"not {what} without confirmation", hint="pass --yes (no terminal to ask on)")
    if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
        raise Cancelled(f"{what} cancelled")
