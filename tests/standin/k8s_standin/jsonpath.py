"""kubectl's jsonpath subset."""

from __future__ import annotations

import json
import re
from typing import Any

from .util import Fail, go_json

# --------------------------------------------------------------------------- jsonpath (kubectl subset)


def _jp_tokens(template: str) -> list[tuple[str, str]]:
    """Split a kubectl jsonpath template into ('text', s) and ('expr', s) parts."""
    out, i = [], 0
    while i < len(template):
        j = template.find("{", i)
        if j < 0:
            out.append(("text", template[i:]))
            break
        if j > i:
            out.append(("text", template[i:j]))
        depth, k = 0, j
        while k < len(template):
            if template[k] == "{":
                depth += 1
            elif template[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        if k >= len(template):
            raise Fail(f"error: error parsing jsonpath {template}, unclosed action")
        out.append(("expr", template[j + 1 : k].strip()))
        i = k + 1
    return out


def _jp_path(expr: str) -> list[tuple[str, Any]]:
    """Parse .a.b['c'][0][*][?(@.k=="v")] into steps."""
    steps: list[tuple[str, Any]] = []
    i = 0
    if expr.startswith("$"):
        i = 1
    while i < len(expr):
        c = expr[i]
        if c == ".":
            i += 1
            name = ""
            while i < len(expr) and expr[i] not in ".[":
                if expr[i] == "\\" and i + 1 < len(expr):
                    name += expr[i + 1]
                    i += 2
                    continue
                name += expr[i]
                i += 1
            if name == "*":
                steps.append(("all", None))
            elif name:
                steps.append(("field", name))
        elif c == "[":
            j = expr.index("]", i) if not expr.startswith("[?(", i) else expr.index(")]", i) + 1
            inner = expr[i + 1 : j]
            i = j + 1
            if inner == "*":
                steps.append(("all", None))
            elif inner.startswith("?("):
                m = re.match(r"\?\(@\.([\w.\-/\\]+)\s*(==|!=)\s*['\"]?([^'\"]*)['\"]?\)$", inner)
                if not m:
                    raise Fail(f"error: error parsing jsonpath {{{expr}}}, unsupported filter {inner}")
                steps.append(
                    ("filter", (m.group(1).replace("\\.", "\x00").split("."), m.group(2), m.group(3)))
                )
            elif inner[:1] in "'\"":
                steps.append(("field", inner[1:-1]))
            elif ":" in inner:
                a, _, b = inner.partition(":")
                steps.append(("slice", (int(a) if a else None, int(b) if b else None)))
            else:
                steps.append(("index", int(inner)))
        else:
            raise Fail(f"error: error parsing jsonpath {{{expr}}}, unrecognized character in action: {c!r}")
    return steps


def _jp_eval(values: list[Any], steps: list[tuple[str, Any]]) -> list[Any]:
    for kind, arg in steps:
        nxt: list[Any] = []
        for v in values:
            if kind == "field" and isinstance(v, dict) and arg in v:
                nxt.append(v[arg])
            elif kind == "all":
                nxt.extend(v.values() if isinstance(v, dict) else v if isinstance(v, list) else [])
            elif kind == "index" and isinstance(v, list) and -len(v) <= arg < len(v):
                nxt.append(v[arg])
            elif kind == "slice" and isinstance(v, list):
                nxt.extend(v[arg[0] : arg[1]])
            elif kind == "filter" and isinstance(v, list):
                keys, op, want = arg
                for item in v:
                    got = item
                    for k in keys:
                        got = got.get(k.replace("\x00", ".")) if isinstance(got, dict) else None
                    sval = got if isinstance(got, str) else json.dumps(got) if got is not None else None
                    if (sval == want) == (op == "=="):
                        nxt.append(item)
        values = nxt
    return values


def _jp_text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return go_json(v)
    return "" if v is None else str(v)


def jsonpath(template: str, data: Any) -> str:
    """kubectl -o jsonpath (allow-missing-template-keys=true): fields, [*], [n], filters, range/end, literals."""
    toks = _jp_tokens(template)

    def render(toks: list[tuple[str, str]], ctx: Any) -> str:
        out, i = [], 0
        while i < len(toks):
            kind, s = toks[i]
            if kind == "text":
                out.append(s)
            elif s.startswith("range "):
                depth, j = 1, i + 1
                while j < len(toks) and depth:
                    if toks[j][0] == "expr" and toks[j][1].startswith("range "):
                        depth += 1
                    elif toks[j] == ("expr", "end"):
                        depth -= 1
                    j += 1
                body = toks[i + 1 : j - 1]
                for item in _jp_eval([ctx], _jp_path(s[6:].strip())):
                    out.append(render(body, item))
                i = j
                continue
            elif s[:1] in "'\"":
                out.append(s[1:-1].encode().decode("unicode_escape"))
            elif s in ("@", "."):
                out.append(_jp_text(ctx))
            else:
                out.append(" ".join(_jp_text(v) for v in _jp_eval([ctx], _jp_path(s.removeprefix("@")))))
            i += 1
        return "".join(out)

    return render(toks, data)
