"""YAML the bundle tools read (profiles, locks, a vendor chart's Chart.yaml), as SafeLoader does,
with every way it can fail one line: YamlError. PyYAML itself raises more than YAMLError: a
ValueError for a value its constructors cannot build (`2001-13-45` as a date, `!!int x`, an int
of more than 4300 digits), a RecursionError from its composer for deep nesting; and a file that is
not UTF-8 is a UnicodeDecodeError before it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# Profiles and locks nest four or five levels; PyYAML's composer recurses once per level.
MAX_DEPTH = 64


class YamlError(Exception):
    """One line: where (line, byte) and what."""


class _Loader(yaml.SafeLoader):
    def compose_node(self, parent: Any, index: Any) -> Any:
        depth = self.__dict__.get("_depth", 0) + 1
        if depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise YamlError(f"line {mark.line + 1}: nested more than {MAX_DEPTH} levels deep")
        self.__dict__["_depth"] = depth
        try:
            return super().compose_node(parent, index)
        finally:
            self.__dict__["_depth"] = depth - 1

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            tag = node.tag.rsplit(":", 1)[-1]
            value = node.value if isinstance(node, yaml.ScalarNode) else f"a {node.id}"
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            why = f" ({_one_line(str(exc).split(';')[0])})" if type(exc) is ValueError else ""
            raise YamlError(f"line {node.start_mark.line + 1}: {shown} is not a valid {tag}{why}") from None


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


def loads(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, ESC, ...)
        char = repr(chr(exc.character)) if isinstance(exc.character, int) else repr(exc.character)
        raise YamlError(
            f"line {text.count(chr(10), 0, exc.position) + 1}: character {char}: {exc.reason}"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        raise YamlError(where + _one_line(getattr(exc, "problem", None) or str(exc))) from None


def read(path: Path) -> Any:
    """The file's YAML; YamlError for text that is not UTF-8 or not YAML. OSError (a missing
    file included) is the caller's."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise YamlError(f"line {line}, byte {column} (0x{data[exc.start]:02x}): not UTF-8") from None
    return loads(text)
