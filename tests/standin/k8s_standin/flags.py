"""Flag parsing (pflag-like)."""

from __future__ import annotations

from typing import Any

from .util import Fail

# --------------------------------------------------------------------------- flag parsing (pflag-like)


def parse_flags(argv: list[str], spec: dict[str, str], short: dict[str, str] | None = None
                ) -> tuple[dict[str, Any], list[str]]:  # fmt: skip
    """spec: name -> 'str' | 'bool' | 'list'.  Returns (flags, positionals)."""
    short = short or {}
    flags: dict[str, Any] = {}
    pos: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        if a == "--":
            pos += argv[i:]
            break
        if a.startswith("-") and len(a) > 1 and not a[1].isdigit():
            long = a.startswith("--")
            name, eq, val = (a[2:] if long else a[1:]).partition("=")
            if not long:
                if name[:1] not in short:
                    raise Fail(f"unknown shorthand flag: '{name[:1]}' in {a}")
                if len(name) > 1 and not eq:  # -oyaml / -nkube-system
                    name, eq, val = name[0], "=", name[1:]
                name = short[name[:1]]
            if name not in spec:
                raise Fail(f"unknown flag: --{name}")
            kind = spec[name]
            if kind == "bool":
                flags[name] = val.lower() not in ("false", "0") if eq else True
                continue
            if not eq:
                if i >= len(argv):
                    raise Fail(f"flag needs an argument: --{name}")
                val = argv[i]
                i += 1
            if kind == "list":
                flags.setdefault(name, []).append(val)
            else:
                flags[name] = val
        else:
            pos.append(a)
    return flags, pos
