"""YAML read as SafeLoader reads it, with every way it can fail one line: YamlError. The base of
appliance.yml's strict loader (core/siteyaml adds its rules) and what the bundle tools read
(profiles, locks, a vendor chart's Chart.yaml). PyYAML itself raises more than YAMLError: a
ValueError for a value its constructors cannot build (`2001-13-45` as a date, `!!int x`, an int
of more than 4300 digits), a RecursionError from its composer for deep nesting; and text that is
not UTF-8 is a UnicodeDecodeError before it. Each is a line number and a problem here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from appliance_cli.fsutil import read_regular

# A site config nests five or six levels (role_vars a few more), profiles and locks four or five;
# PyYAML's composer recurses once per level.
MAX_DEPTH = 64


class Refused(yaml.MarkedYAMLError):
    """A construct the loader does not accept, at its line."""


class YamlError(Exception):
    """One line: `line N: problem`. `refused`: a construct the loader refuses (too deep, a value
    that cannot be built, a loader's own rule) rather than text that is not YAML."""

    def __init__(self, line: int | None, problem: str, refused: bool = False):
        super().__init__(f"line {line}: {problem}" if line else problem)
        self.line, self.problem, self.refused = line, problem, refused


class Loader(yaml.SafeLoader):
    """SafeLoader, with nesting capped at MAX_DEPTH and a value it cannot build refused at its
    line. A subclass adds its own rules in _compose_node (below the depth check)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        depth = self.__dict__.get("_depth", 0) + 1
        if depth > MAX_DEPTH:
            raise Refused(
                problem=f"nested more than {MAX_DEPTH} levels deep",
                problem_mark=self.peek_event().start_mark,
            )
        self.__dict__["_depth"] = depth
        try:
            return self._compose_node(parent, index)
        finally:
            self.__dict__["_depth"] = depth - 1

    def _compose_node(self, parent: Any, index: Any) -> Any:
        return super().compose_node(parent, index)

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        """SafeConstructor's own errors for a value it cannot build (`2001-13-45` as a date, `!!int
        x`, an int past 4300 digits) are plain ValueErrors: refused here at the value's line."""
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            tag = node.tag.rsplit(":", 1)[-1]
            value = node.value if isinstance(node, yaml.ScalarNode) else f"a {node.id}"
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            # ValueError says why ("month must be in 1..12"; int()'s digit limit, less its advice
            # to call sys.set_int_max_str_digits); the others say only how PyYAML failed
            why = f" ({one_line(str(exc).split(';')[0])})" if type(exc) is ValueError else ""
            raise Refused(
                problem=f"{shown} is not a valid {tag}{why}", problem_mark=node.start_mark
            ) from None


def one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _char(c: int | str | bytes) -> str:
    """ReaderError's character: a code point (str input) or a byte."""
    return repr(chr(c)) if isinstance(c, int) else repr(c)


def loads(text: str, loader: type[Loader] = Loader) -> Any:
    """Parse `text` with `loader` (a Loader subclass); YamlError naming the line."""
    try:
        return yaml.load(text, Loader=loader)  # a SafeLoader subclass
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, ESC, ...)
        line = text.count("\n", 0, exc.position) + 1
        raise YamlError(line, f"character {_char(exc.character)}: {exc.reason}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = one_line(getattr(exc, "problem", None) or str(exc))
        raise YamlError(mark.line + 1 if mark else None, problem, isinstance(exc, Refused)) from None


class NotUtf8(ValueError):
    """`line N, byte M (0xNN): not UTF-8`."""


def utf8(data: bytes) -> str:
    """`data` decoded; NotUtf8 naming the line and byte where it is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise NotUtf8(f"line {line}, byte {column} (0x{data[exc.start]:02x}): not UTF-8") from None


def read(path: Path) -> Any:
    """The file's YAML; YamlError for text that is not UTF-8 or not YAML. OSError (a missing
    file, one that is no regular file) is the caller's."""
    try:
        text = utf8(read_regular(path))
    except NotUtf8 as exc:
        raise YamlError(None, str(exc)) from None
    return loads(text)
