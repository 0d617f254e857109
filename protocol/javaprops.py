"""Java ``.properties`` text (RocketMQ's ``broker.conf`` / ``namesrv.conf``) read and edited as Java reads it.

Pure functions over text, no I/O: :func:`parse` gives every entry with the physical line it starts
on (so a problem is reported as ``file:line``), :func:`edit` sets keys in a text, keeping every other
line as written, and :func:`escape` writes a key or value back. The grammar is java.util.Properties':

- natural lines end at LF, CR or CRLF; a line's leading spaces, tabs and form feeds are skipped; a
  line that is then empty, or starts with ``#`` or ``!``, is a comment (a comment never continues);
- a line ending in an odd number of backslashes continues on the next one: that backslash and the
  line break are dropped, as is the next line's leading white space (an empty next line ends it); a
  backslash with nothing before it begins no line (what follows is read afresh, comments included),
  except at the very end of the text, where it is an entry with the empty key (Java 9+'s LineReader);
- the key runs to the first unescaped ``=``, ``:`` or white space; white space around it and at
  most one ``=``/``:`` separate it from the value, which runs to the end of the line (trailing white
  space included, as in Java);
- in keys and values ``\\t \\n \\r \\f`` and ``\\uXXXX`` are escapes (pairs of UTF-16 surrogates
  join into one character), a backslash before any other character stands for that character, and
  a malformed ``\\u`` is an error.

Java's ``Properties.load(InputStream)`` decodes bytes as ISO-8859-1; decoding is the caller's.
"""

from __future__ import annotations

import re

import attrs

__all__ = ["Entry", "PropertiesError", "edit", "escape", "parse", "split_lines"]

_WS = " \t\f"
_BREAK = re.compile(r"\r\n|\r|\n")


class PropertiesError(ValueError):
    """A text Java's Properties would refuse (a malformed ``\\u`` escape), with the line it starts on."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


@attrs.frozen
class Entry:
    """One ``key=value`` of the text: ``line`` and ``end`` are the first and last physical lines (1-based)
    it spans (they differ when it continues over backslash-ended lines)."""

    key: str
    value: str
    line: int
    end: int


def split_lines(text: str) -> list[tuple[str, str]]:
    """The natural lines of ``text``: (content, its line break: "\\n", "\\r\\n", "\\r" or "" for the last)."""
    out: list[tuple[str, str]] = []
    pos = 0
    for m in _BREAK.finditer(text):
        out.append((text[pos:m.start()], m.group()))
        pos = m.end()
    if pos < len(text):
        out.append((text[pos:], ""))
    return out


def _odd_backslashes(s: str) -> bool:
    return (len(s) - len(s.rstrip("\\"))) % 2 == 1


def _logical_lines(text: str) -> list[tuple[str, int, int]]:
    """(logical line, first physical line, last physical line) for every non-comment, non-empty line."""
    natural = split_lines(text)
    lines = [content for content, _ in natural]
    out: list[tuple[str, int, int]] = []
    i = 0
    while i < len(lines):
        start = i
        buf = lines[i].lstrip(_WS)
        i += 1
        if not buf or buf[0] in "#!":
            continue
        keep = True
        while _odd_backslashes(buf):
            buf = buf[:-1]
            if i >= len(lines):
                # Java's quirk: a backslash that ends the text (or is followed only by a CR or an LF, not
                # a CRLF) still yields its line, even an empty one: the key ""
                keep = bool(buf) or natural[-1][1] != "\r\n"
                break
            if not buf:  # nothing before the backslash: the logical line has not begun; start afresh
                keep = False
                break
            nxt = lines[i].lstrip(_WS)
            i += 1
            if not nxt:
                break
            buf += nxt
        if keep:
            out.append((buf, start + 1, i))
    return out


def _split_key(line: str) -> tuple[str, str]:
    """The raw (still escaped) key and value of one logical line."""
    escaped = False
    end = len(line)
    value_at = len(line)
    has_sep = False
    for k, ch in enumerate(line):
        if not escaped and ch in "=:":
            end, value_at, has_sep = k, k + 1, True
            break
        if not escaped and ch in _WS:
            end, value_at = k, k + 1
            break
        escaped = ch == "\\" and not escaped
    while value_at < len(line):
        ch = line[value_at]
        if ch not in _WS:
            if has_sep or ch not in "=:":
                break
            has_sep = True
        value_at += 1
    return line[:end], line[value_at:]


_SIMPLE = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_HEX = frozenset("0123456789abcdefABCDEF")


def _unescape(raw: str, line: int) -> str:
    out: list[str] = []
    k = 0
    while k < len(raw):
        ch = raw[k]
        k += 1
        if ch != "\\" or k >= len(raw):
            out.append(ch)
            continue
        ch = raw[k]
        k += 1
        if ch == "u":
            digits = raw[k:k + 4]
            if len(digits) < 4 or not set(digits) <= _HEX:
                bad = "\\u" + digits
                raise PropertiesError(line, f"malformed \\uxxxx escape {bad!r}")
            out.append(chr(int(digits, 16)))
            k += 4
        else:
            out.append(_SIMPLE.get(ch, ch))
    text = "".join(out)
    if any("\ud800" <= c <= "\udfff" for c in text):  # Java strings are UTF-16: join escaped surrogate pairs
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return text


def parse(text: str) -> list[Entry]:
    """Every entry of ``text`` in file order (a key may repeat: Java keeps the last, the caller decides);
    ``PropertiesError`` for a text Java's Properties.load refuses."""
    out = []
    for logical, first, last in _logical_lines(text):
        key, value = _split_key(logical)
        out.append(Entry(_unescape(key, first), _unescape(value, first), first, last))
    return out


def escape(text: str, *, key: bool = False) -> str:
    """``text`` as Java's Properties.store writes a key (``key=True``) or a value: the separators,
    comment marks, backslashes and a value's leading space escaped, characters outside printable
    ASCII as ``\\uXXXX`` (UTF-16 units), so the line reads back as ``text`` with any encoding."""
    out: list[str] = []
    for pos, ch in enumerate(text):
        if ch == " ":
            out.append("\\ " if key or pos == 0 else " ")
        elif ch in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[ch])
        elif ch in "=:#!\\":
            out.append("\\" + ch)
        elif " " < ch < "\x7f":
            out.append(ch)
        else:
            units = ch.encode("utf-16-be", "surrogatepass")
            out.extend(f"\\u{int.from_bytes(units[n:n + 2], 'big'):04X}" for n in range(0, len(units), 2))
    return "".join(out)


def edit(text: str, changes: dict[str, str]) -> str:
    """``text`` with each key of ``changes`` set to its value: the line(s) of its last entry replaced by
    ``key=value``, or the line appended; comments, order and every other line are kept as written."""
    lines = split_lines(text)
    last = {e.key: e for e in parse(text)}
    todo = dict(changes)
    out: list[str] = []
    k = 0
    while k < len(lines):
        entry = next((e for key, e in last.items() if key in todo and e.line == k + 1), None)
        if entry is None:
            out.append(lines[k][0] + lines[k][1])
            k += 1
            continue
        indent = lines[k][0][: len(lines[k][0]) - len(lines[k][0].lstrip(_WS))]
        out.append(f"{indent}{escape(entry.key, key=True)}={escape(todo.pop(entry.key))}{lines[entry.end - 1][1]}")
        k = entry.end
    body = "".join(out)
    if todo:
        if lines and _odd_backslashes(lines[-1][0]):
            body += "\n" if lines[-1][1] else "\n\n"  # an empty line ends the last line's continuation
        elif body and not lines[-1][1]:
            body += "\n"
        body += "".join(f"{escape(key, key=True)}={escape(value)}\n" for key, value in todo.items())
    want = {**{e.key: e.value for e in parse(text)}, **changes}
    if {e.key: e.value for e in parse(body)} != want:
        raise ValueError("the edited text would not read back as intended; left unchanged")
    return body
