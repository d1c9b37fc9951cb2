"""appliance.yml's text and YAML, read strictly: the site config switches controls on and off, so
a reading that differs from what the operator sees is a hole.

* UTF-8 only: anything else is one line naming the line and byte, never a UnicodeDecodeError.
* A key given twice in one mapping is refused with both line numbers (PyYAML lets the later one
  win: `require_signature: true` ... `require_signature: false` turned checking off).
* Aliases are capped: what they expand to, counted in YAML nodes, stays under ALIAS_CAP (nested
  ones expanded to gigabytes when the inventory was rendered: the "billion laughs"). PyYAML's own
  dumper writes an alias for an object it meets twice, so a generated file may hold a few. An
  alias inside the value it names (`x: &a [1, *a]`) is refused: SafeLoader builds a list that
  holds itself, and everything that walks the site's values recursed until a RecursionError.
* Only the YAML 1.1 core tags (SafeLoader): no `!unsafe`, no `!!python/...`.
* Whatever the text holds, a problem is one line naming where: a value PyYAML cannot construct
  (`2001-13-45` read as a date, `!!int x`, an integer of more than 4300 digits), nesting deeper
  than MAX_DEPTH (PyYAML's composer recurses: a RecursionError) and a character YAML refuses
  (a NUL, an escape) are ConfigErrors, never an unexpected error (exit 70).

The UTF-8 check, the depth cap and the refusal of values that cannot be built are
appliance_cli.yamlfile's (the bundle tools read their YAML with it); the duplicate-key and alias
rules are this file's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from appliance_cli import yamlfile
from appliance_cli.errors import ConfigError
from appliance_cli.fsutil import read_regular
from appliance_cli.yamlfile import MAX_DEPTH, Refused

__all__ = ["ALIAS_CAP", "MAX_DEPTH", "load", "loads", "read_text"]

_HINT = "fix the line named above; `appliance init` writes a documented skeleton"

# A site config is a few hundred YAML nodes; aliases may add this many more in all.
ALIAS_CAP = 10_000


def _expanded(node: Any, memo: dict[int, int]) -> int:
    """How many nodes `node` stands for once every alias in it is written out."""
    if id(node) not in memo:
        memo[id(node)] = 0  # a node met again while counting it: a cycle, refused where its alias is
        if isinstance(node, yaml.MappingNode):
            memo[id(node)] = 1 + sum(_expanded(k, memo) + _expanded(v, memo) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            memo[id(node)] = 1 + sum(_expanded(v, memo) for v in node.value)
        else:
            memo[id(node)] = 1
    return memo[id(node)]


class _StrictLoader(yamlfile.Loader):
    """yamlfile.Loader (depth, values it cannot build) with the site config's own rules: aliases
    capped and never inside what they name, a key given once."""

    def _compose_node(self, parent: Any, index: Any) -> Any:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        open_anchors: list[str] = self.__dict__.setdefault("_open_anchors", [])
        if not self.check_event(yaml.AliasEvent):
            if event.anchor is None:
                return super()._compose_node(parent, index)
            open_anchors.append(event.anchor)  # PyYAML refuses an anchor given twice: names are unique
            try:
                return super()._compose_node(parent, index)
            finally:
                open_anchors.pop()
        if event.anchor in open_anchors:  # SafeLoader would build a list or dict that holds itself
            raise Refused(
                problem=f"alias *{event.anchor} is inside the value &{event.anchor} it names (a cycle)",
                problem_mark=event.start_mark,
            )
        target = self.anchors.get(event.anchor)
        if target is not None:
            memo = self.__dict__.setdefault("_alias_memo", {})
            total = self.__dict__.get("_alias_total", 0) + _expanded(target, memo)
            self.__dict__["_alias_total"] = total
            if total > ALIAS_CAP:
                raise Refused(
                    problem=f"aliases expand to more than {ALIAS_CAP} values (at *{event.anchor}); "
                    "write the values out",
                    problem_mark=event.start_mark,
                )
        return super()._compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: SafeLoader refuses it below
                    continue
                line = key_node.start_mark.line + 1
                if first is not None:
                    raise Refused(
                        problem=f"key {key!r} is given twice (lines {first} and {line}); keep one",
                        problem_mark=key_node.start_mark,
                    )
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_text(path: Path) -> str:
    """The file's text; ConfigError (exit 2) naming the line and byte where it is not UTF-8, or
    when it is no regular file (a FIFO waited for a writer forever) or cannot be read."""
    try:
        return yamlfile.utf8(read_regular(path))
    except yamlfile.NotUtf8 as exc:
        raise ConfigError([f"{path}: {exc}"], hint="save the file as UTF-8") from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read it ({exc.strerror or exc})"]) from None


def loads(text: str, source: Path | str) -> Any:
    """Parse appliance.yml's text strictly; ConfigError (exit 2), one line naming the line."""
    try:
        return yamlfile.loads(text, _StrictLoader)
    except yamlfile.YamlError as exc:
        where = f" line {exc.line}:" if exc.line else ""
        problem = exc.problem if exc.refused else f"not valid YAML ({exc.problem})"
        raise ConfigError([f"{source}:{where} {problem}"], hint=_HINT) from None


def load(path: Path) -> Any:
    return loads(read_text(path), path)
