"""Terminal output: one Console for results (stdout) and one for diagnostics (stderr)."""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.markup import escape
from rich.text import Text

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def interactive() -> bool:
    """Live progress only on a terminal; CI and pipes get plain, line-oriented output."""
    return sys.stdout.isatty() and not os.environ.get("CI")


# C0 controls, DEL and C1 controls: an ESC sequence in a manifest field or a node's answer would
# move the cursor, clear the screen or retitle the operator's terminal; rich passes ESC through
# and drops BEL, CR and a few others without a trace. Each is shown as repr shows it: \x1b.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_LINES = {c: v for c, v in _CONTROLS.items() if chr(c) not in "\n\t"}


def visible(text: str, lines: bool = True) -> str:
    """`text` with every control character written as its escape (\\x1b), ordinary text as it is;
    newlines and tabs are kept when `lines` (a message), escaped too when not (a table cell)."""
    return text.translate(_LINES if lines else _CONTROLS)


def cell(value: str) -> Text:
    """A table cell holding a value read from a bundle, a node or a file: no markup, no controls."""
    return Text(visible(value, lines=False))


# Messages carry the tools' own words, brackets included ("[ERROR CRI]", "Error: [a and b ...]"):
# escaped, so rich never takes them for markup and drops them.
def error(message: str, hint: str | None = None) -> None:
    err.print(f"[bold red]error:[/] {escape(visible(message))}", markup=True, highlight=False)
    if hint:
        show_hint(hint)


def show_hint(message: str) -> None:
    err.print(f"[yellow]hint:[/] {escape(visible(message))}", markup=True, highlight=False)


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(visible(message))}", markup=True, highlight=False)


def info(message: str) -> None:
    out.print(visible(message), markup=False, highlight=False)


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
