"""Changed settings written into the text of a user's TOML file, line by line, keeping everything else.

RocketMQ rewrites its properties file when an admin changes a setting at run time; rmq does the same
to the rmqd TOML file, but only touches the lines of the keys that changed (comments, order and the
other tables stay as the user wrote them). :func:`edit` parses its result back: a text this editor
cannot change safely (the table written inline, a dotted key) is refused and the caller is told why.
Text in, text out: reading and replacing the file is the caller's (``rmq.kernel.ConfigFile.edit``).
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

__all__ = ["TomlEditError", "edit", "render", "toml_value"]

_HEADER = re.compile(r"^\s*\[\s*([A-Za-z0-9_.-]+)\s*\]\s*(#.*)?$")


class TomlEditError(ValueError):
    """The file could not be updated; nothing was written."""


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    out = []
    for ch in str(value):  # a TOML basic string: quote, backslash and control characters escaped
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_value(v: Any) -> str:
    """One TOML value (scalars, lists, inline tables): ``rmqd config``'s dump and generated test configs."""
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    if not isinstance(v, bool | int | float | str):
        raise TypeError(f"cannot write {type(v).__name__} to TOML")
    return _literal(v)


def render(text: str, table: str, changes: dict[str, Any]) -> str:
    """``text`` with ``table.key = value`` set for every change (appended to the table, or a new table)."""
    lines = text.split("\n")  # TOML lines end at LF only (not at U+0085 or U+2028)
    if lines and lines[-1] == "":
        lines.pop()
    start = next((i for i, ln in enumerate(lines) if (m := _HEADER.match(ln)) and m.group(1) == table), None)
    todo = dict(changes)
    if start is None:
        block = [f"{k} = {_literal(v)}" for k, v in todo.items()]
        return text.rstrip("\n") + ("\n\n" if text.strip() else "") + f"[{table}]\n" + "\n".join(block) + "\n"
    end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
    for i in range(start + 1, end):
        m = re.match(r"^(\s*)([A-Za-z0-9_-]+)\s*=", lines[i])
        if m and m.group(2) in todo:
            lines[i] = f"{m.group(1)}{m.group(2)} = {_literal(todo.pop(m.group(2)))}"
    last = end
    while last > start + 1 and not lines[last - 1].strip():
        last -= 1
    lines[last:last] = [f"{k} = {_literal(v)}" for k, v in todo.items()]
    return "\n".join(lines) + "\n"


def edit(text: str, table: str, changes: dict[str, Any]) -> str:
    """``text`` with the keys in ``[table]`` set, verified by parsing it back; TomlEditError when the
    result would not parse or would not hold the changes (then nothing should be written)."""
    new = render(text, table, changes)
    try:
        doc = tomllib.loads(new)
    except tomllib.TOMLDecodeError as e:
        raise TomlEditError(f"the edit would not parse ({e}); left unchanged") from None
    got = doc.get(table) if isinstance(doc.get(table), dict) else {}
    wrong = [k for k, v in changes.items() if got.get(k) != v]
    if wrong:
        raise TomlEditError(f"cannot set {', '.join(wrong)} in [{table}] safely (inline table or dotted "
                            "keys?); left unchanged")
    return new
