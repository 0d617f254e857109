"""RocketMQ's own config files (``broker.conf``, ``namesrv.conf``: Java properties) as rmqd's tables.

A RocketMQ deployment's files start rmqd unchanged: ``rmqd --config broker.conf`` reads the file as
RocketMQ's BrokerStartup does (one flat file whose keys fill BrokerConfig, MessageStoreConfig,
NettyServerConfig and NettyClientConfig) into the ``[broker]`` table; a ``namesrv.conf`` (NamesrvConfig,
NettyServerConfig; with ``enableControllerInNamesrv=true`` RocketMQ 5's ControllerConfig keys too) into
``[namesrv]`` (and ``[controller]``); a controller's file into ``[controller]``. From there the file is
what the same TOML would be: the same keys, defaults, strictness and ``--set`` overrides.

Pure functions over text and the tables' field types (the kernel passes them): no I/O.

- :func:`config_format`: ``*.toml`` is TOML; ``*.conf`` / ``*.properties`` are Java properties; any other
  name is TOML when it parses as TOML into tables only, else properties.
- :func:`document`: the entries of a properties file -> ``{table: {key: value}}`` plus the line of each
  key, so every later problem names ``file:line``. Which table: the keys decide (a key only a broker has,
  ``brokerName``, makes a broker's file; ``kvConfigPath`` a name server's), else the file's name
  (``broker*``, ``namesrv*`` / ``nameserver*``, ``controller*``).
- Values are typed by the field they set: ``true`` / ``false`` (any case) for a switch, a whole number,
  a decimal; a key or value RocketMQ would silently drop is refused instead (Java ignores ``brokerId=x``
  and reads ``yes`` as false); surrounding white space is trimmed; a key set twice is refused.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rmq.protocol import tomledit
from rmq.protocol.rocketmq_keys import ALIASES, IGNORED, REFUSED

if TYPE_CHECKING:  # the properties reader loads when a properties file is read or edited, not at every start
    from rmq.protocol import javaprops

__all__ = ["ConfFileError", "config_format", "document", "edit_text", "locate"]

ROLES = ("broker", "namesrv", "controller")
_NAMES = (("namesrv", "namesrv"), ("nameserver", "namesrv"), ("controller", "controller"), ("broker", "broker"))
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[dDfF]?")


class ConfFileError(ValueError):
    """One line: ``file:line: what is wrong``."""


def config_format(name: str, text: str) -> str:
    """"toml" or "properties": by the file's extension, else by its content."""
    lower = name.lower()
    if lower.endswith(".toml"):
        return "toml"
    if lower.endswith((".conf", ".properties")):
        return "properties"
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return "properties"
    return "toml" if all(isinstance(v, dict) for v in doc.values()) else "properties"


def _known(section: str, fields: Mapping[str, Mapping[str, Any]]) -> set[str]:
    return set(fields.get(section, {})) | set(ALIASES.get(section, {})) | set(REFUSED[section]) | set(IGNORED[section])


def _role(entries: list[javaprops.Entry], source: str, fields: Mapping[str, Mapping[str, Any]]
          ) -> tuple[str, str]:
    """The role whose file this is, and why (for messages)."""
    known = {r: _known(r, fields) for r in ROLES}
    for role, others in (("broker", ("namesrv", "controller")), ("namesrv", ("broker",)),
                         ("controller", ("broker", "namesrv"))):
        for e in entries:
            if e.key in known[role] and not any(e.key in known[o] for o in others):
                return role, f"line {e.line} sets {e.key}"
    stem = source.replace("\\", "/").rsplit("/", 1)[-1].lower()
    for prefix, role in _NAMES:
        if stem.startswith(prefix):
            return role, f"the file is named {stem}"
    raise ConfFileError(f"{source}: cannot tell whose settings these are (a broker's, a name server's or a "
                        "controller's: no key only one of them has): name the file broker*.conf, namesrv*.conf "
                        "or controller*.conf")


def _typed(value: str, kind: Any, where: str) -> Any:
    name = getattr(kind, "__name__", kind)
    if name == "str":
        return value
    if name == "bool" and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if name == "int" and _INT.fullmatch(value):
        return int(value)
    if name == "float" and _FLOAT.fullmatch(value):
        return float(value.rstrip("dDfF"))
    expected = {"bool": "true or false", "int": "a whole number", "float": "a number"}.get(str(name))
    if expected is None:
        raise ConfFileError(f"{where}: a {name} setting cannot be written in a properties file: use TOML")
    raise ConfFileError(f"{where}: expected {expected}, got {value!r}")


def document(entries: list[javaprops.Entry], source: str, fields: Mapping[str, Mapping[str, Any]]
             ) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """``{table: {key: value}}`` from a properties file's entries, and ``{"table.key": line}``.

    ``fields`` maps each role table to its fields' types. Unknown keys (for the file's role), keys set
    twice and values that do not fit their field raise ``ConfFileError`` naming the file and line.
    """
    from rmq.kernel.options import did_you_mean  # the kernel's one spelling helper (pure)

    role, why = _role(entries, source, fields)
    doc: dict[str, dict[str, Any]] = {role: {}}
    lines: dict[str, int] = {}
    seen: dict[str, int] = {}
    extra = ("controller",) if role == "namesrv" else ()  # RocketMQ 5: a name server that runs the controller
    for e in entries:
        where = f"{source}:{e.line}: {e.key}"
        if e.key in seen:
            raise ConfFileError(f"{where} is set twice (first on line {seen[e.key]}); keep one")
        seen[e.key] = e.line
        value = e.value.strip()
        tables = [role] if e.key in _known(role, fields) else []
        tables += [t for t in extra if ALIASES[t].get(e.key, e.key) in fields.get(t, {})]
        if not tables:
            other = next((r for r in ROLES if e.key in _known(r, fields)), None)
            if other is not None:
                raise ConfFileError(f"{where}: is a {other} setting, and this is read as a {role}'s file ({why})")
            hint = did_you_mean(e.key, sorted(_known(role, fields)))
            raise ConfFileError(f"{source}:{e.line}: unknown key {e.key!r}{hint}")
        for table in tables:
            field = ALIASES[table].get(e.key, e.key)
            kind = fields.get(table, {}).get(field)
            doc.setdefault(table, {})[e.key] = value if kind is None else _typed(value, kind, where)
            lines[f"{table}.{e.key}"] = lines[f"{table}.{field}"] = e.line
    if "controller" in doc and role == "namesrv" and doc[role].get("enableControllerInNamesrv") is not True:
        key = next(iter(doc["controller"]))
        raise ConfFileError(f"{source}:{lines['controller.' + key]}: {key} configures the controller, which "
                            "this name server runs only with enableControllerInNamesrv=true: add it, or remove the key")
    return doc, lines


def locate(message: str, source: str, lines: Mapping[str, int]) -> str:
    """``message`` (``"<source>: ..."``) with the line of the first ``table.key`` it names: ``<source>:N: ...``."""
    if not message.startswith(f"{source}: "):
        return message
    for m in re.finditer(r"\b(\w+\.\w+)\b", message[len(source) + 2:]):
        if m.group(1) in lines:
            return f"{source}:{lines[m.group(1)]}: {message[len(source) + 2:]}"
    return message


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def edit_text(name: str, text: str, table: str, changes: dict[str, Any]) -> str:
    """The config file's ``text`` with run-time changes of ``[table]`` written in, in the file's own format
    (UPDATE_BROKER_CONFIG / UPDATE_NAMESRV_CONFIG persist so); ValueError when that cannot be done safely."""
    if config_format(name, text) == "toml":
        return tomledit.edit(text, table, changes)
    from rmq.protocol import javaprops

    return javaprops.edit(text, {k: _text(v) for k, v in changes.items()})
