"""rmqd configuration: TOML -> attrs, strictly; the kernel owns the mechanism, the tables' keys live elsewhere.

The kernel structures every table with one strict converter, renders any problem as one line naming
the file and the key, applies ``--set`` overrides typed by the target field, assembles the embedded
default and dumps the effective configuration (``rmqd config``). Its own tables are ``[plugins]``
(the selection), ``[plugin.<namespace>.<name>]`` (a plugin's options: opaque here, the plugin
structures them), ``[tls]`` (opaque: the transports read it) and ``[log]``.

Every other top-level table is declared by an installed package, the way plugins are: an entry point
in the group ``rmq.sections`` names the table's attrs class (the roles' ``[namesrv]``, ``[controller]``,
``[broker]`` and ``[proxy]`` in ``rmq.roles``, the dashboard plugin's ``[dashboard]``). The class may
also have:

- ``problem(self) -> str``: the line that refuses start-up ("" = none), once the table is structured;
- ``from_table(cls, table)``: its own structuring instead of the converter (``ValueError``: one line);
- ``embedded: ClassVar[dict]``: its table in the embedded default (without it: absent there);
- ``when_absent: ClassVar[str]``: what ``rmqd config`` says of a config without the table;
- for a role (a table in ``ROLE_SECTIONS``, whose presence turns the role on): ``plugins(self)``, what it
  selects per namespace unless ``[plugins]`` says otherwise (default: the ``rmq.processors`` plugin
  named like the role); ``required: ClassVar[tuple[str, ...]]``, namespaces that must not be empty;
  ``implies(self)``, the other roles it turns on (with their defaults when their table is absent);
  ``supervisor(self, root, argv)`` / ``worker(self, root, k)``: this rmqd supervises child rmqd processes
  instead of running the role itself (see ``rmq.kernel.daemon``).
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import attrs
import cattrs

from rmq.kernel.options import did_you_mean, first_error, make_converter
from rmq.protocol.rocketmq_conf import ConfFileError, config_format, document, locate
from rmq.protocol.rocketmq_keys import ALIASES, ignored, refusal
from rmq.protocol.tomledit import toml_value


class ConfigError(Exception):
    """A configuration problem, rendered as one line naming file, key path and expectation."""


def rmq_home() -> Path:
    """Where rmqd keeps what no setting places elsewhere: $RMQ_HOME, else ./rmq-store."""
    return Path(os.environ.get("RMQ_HOME") or "rmq-store")


NAMESPACES = (
    "storage",
    "dispatch",
    "allocation",
    "filters",
    "flush",
    "replication",
    "remoting",
    "processors",
    "extensions",
    "auth",
)
#: what every process selects, clients too: the transport, the filters and every allocation strategy
BASE_SELECTION = {
    "remoting": ["tcp"],
    "filters": ["tag", "sql92", "class"],
    "allocation": ["averagely", "averagely_by_circle", "consistent_hash", "machine_room", "machine_room_nearby",
                   "by_config"],
}
ROLE_SECTIONS = ("namesrv", "controller", "broker")  # the tables that turn a role on, in start order
SECTIONS_GROUP = "rmq.sections"


@functools.cache
def declared() -> dict[str, EntryPoint]:
    """Every installed ``rmq.sections`` entry point: table name -> where its class is."""
    return {ep.name: ep for ep in entry_points(group=SECTIONS_GROUP)}


def section_class(name: str) -> type:
    """The attrs class of top-level table ``name``: ``[log]``'s, else the one its entry point declares."""
    if name == "log":
        return LogConfig
    ep = declared().get(name)
    if ep is None:
        raise ConfigError(_undeclared(name))
    return ep.load()  # type: ignore[no-any-return]


def _undeclared(name: str) -> str:
    return f"[{name}]: no installed package declares this table (entry point {SECTIONS_GROUP}:{name}); reinstall rmq"


@attrs.define
class LogConfig:
    level: str = "INFO"


@attrs.define
class RootConfig:
    """The whole TOML document: the kernel's tables, and every declared one in ``tables``, read as an
    attribute (``config.broker``; None when the file has no such table). A role's table turns it on."""

    plugins: dict[str, list[str]] = attrs.field(factory=dict)
    plugin: dict[str, dict[str, dict[str, Any]]] = attrs.field(factory=dict)
    log: LogConfig = attrs.field(factory=LogConfig)
    tls: dict[str, Any] = attrs.field(factory=dict)  # opaque here: the transports read it
    tables: dict[str, Any] = attrs.field(factory=dict, metadata={"internal": True})
    source: str = attrs.field(default="<defaults>", metadata={"internal": True})
    #: RocketMQ keys accepted and ignored ("broker.serverWorkerThreads <why>"): logged at start, dumped as comments
    ignored: list[str] = attrs.field(factory=list, metadata={"internal": True})

    def __getattr__(self, name: str) -> Any:
        if name in ROLE_SECTIONS or name in declared():
            return self.tables.get(name)
        raise AttributeError(f"{type(self).__name__} has no table {name!r}")

    def roles(self) -> list[str]:
        return [r for r in ROLE_SECTIONS if self.tables.get(r) is not None]

    def selected(self) -> dict[str, list[str]]:
        """Plugin names per namespace: the TOML's choice, else what the roles that are on select."""
        out: dict[str, list[str]] = {ns: list(BASE_SELECTION.get(ns, ())) for ns in NAMESPACES}
        for role in self.roles():
            table = self.tables[role]
            for ns, names in (table.plugins() if hasattr(table, "plugins") else {"processors": [role]}).items():
                out[ns] += [n for n in names if n not in out[ns]]
        out.update({ns: list(names) for ns, names in self.plugins.items()})
        return out

    def required(self) -> list[str]:
        """Namespaces that must not be empty: the transport, the processors, and what the roles on require."""
        return ["remoting", "processors"] + [ns for r in self.roles() for ns in getattr(self.tables[r], "required", ())]

    def plugin_options(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.plugin.get(namespace, {}).get(name, {}))


def _make_converter() -> cattrs.Converter:
    conv = make_converter()

    def names_hook(value: Any, _: Any) -> list[str]:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise ValueError("expected a plugin name or a list of names")

    def plugins_hook(value: Any, _: Any) -> dict[str, list[str]]:
        if not isinstance(value, dict):
            raise ValueError("expected a table of namespace = name(s)")
        out = {}
        for ns, names in value.items():
            if ns not in NAMESPACES:
                hint = did_you_mean(ns, NAMESPACES)
                raise ValueError(f"unknown plugin namespace {ns!r}{hint}; namespaces: {', '.join(NAMESPACES)}")
            try:
                out[ns] = names_hook(names, None)
            except ValueError as e:
                raise ValueError(f"{ns}: {e}") from None
        return out

    conv.register_structure_hook_func(lambda t: t == dict[str, list[str]], plugins_hook)
    return conv


CONVERTER = _make_converter()
KERNEL_TABLES = tuple(f.name for f in attrs.fields(RootConfig) if not f.metadata.get("internal"))


def _render_error(exc: Exception, source: str, section: str = "") -> str:
    """One line: file, key path, what was expected; a RocketMQ key rmq refuses says why
    (``protocol/rocketmq_keys.py``), never "unknown"."""
    path, text = first_error(exc)
    path = ".".join(p for p in (section, path) if p)
    if text.startswith("extra fields found (") and text.endswith(")"):
        extras = text[len("extra fields found (") : -1].split(", ")
        cls = section_class(path.split(".")[0]) if path else RootConfig
        known = [f.name for f in attrs.fields(cls) if not f.metadata.get("internal")]
        key = f"{path}.{extras[0]}" if path else extras[0]
        why = refusal(path.split(".")[0] if path else "", extras[0])
        if why is not None:
            return f"{source}: {key} {why}"
        return f"{source}: unknown key {key!r}{did_you_mean(extras[0], known)}"
    return f"{source}: {path or '(top level)'}: {text}"


def _typed(dotted: str, raw: str, key: str, cls: type) -> Any:
    """``--set``'s text as the type of field ``key`` of ``cls`` (a string field takes it as written)."""
    fields = {f.name: f for f in attrs.fields(cls)}
    if key not in fields:
        raise ConfigError(f"--set {dotted}: unknown key {dotted!r}{did_you_mean(key, fields)}")
    kind = getattr(fields[key].type, "__name__", fields[key].type)
    try:
        if kind == "str":
            return raw
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "bool":
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return raw.lower() in ("true", "1")
    except ValueError:
        raise ConfigError(f"--set {dotted}={raw}: expected {kind}") from None
    return _toml_or_text(raw)


def _toml_or_text(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def _coerce_override(root: dict[str, Any], dotted: str, raw: str) -> None:
    """Apply ``--set section.key=value`` to the raw TOML dict, typed by the target field."""
    parts = dotted.split(".")
    if len(parts) < 2:
        raise ConfigError(f"--set {dotted}={raw}: expected section.key=value")
    section, key = parts[0], ALIASES.get(parts[0], {}).get(parts[-1], parts[-1])
    if section in declared() or section == "log":
        value = _typed(dotted, raw, key, section_class(section)) if len(parts) == 2 else _toml_or_text(raw)
    elif section in ("plugins", "plugin", "tls"):
        value = _toml_or_text(raw)
    else:
        known = [*ROLE_SECTIONS, *sorted(set(declared()) - set(ROLE_SECTIONS)), "tls", "plugins", "plugin", "log"]
        raise ConfigError(f"--set {dotted}: unknown section {section!r}; sections: {', '.join(known)}")
    node = root
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {dotted}: {p!r} is not a table")
    node[key] = value


EMBEDDED = "<embedded default>"


def embedded_default() -> dict[str, Any]:
    """``rmqd`` with no config: every declared table that has an ``embedded`` one (the roles' own say why)."""
    tables = {name: getattr(section_class(name), "embedded", None) for name in declared()}
    return {name: dict(table) for name, table in tables.items() if table is not None}


def _read_properties(text: str, source: str) -> tuple[dict[str, Any], dict[str, int]]:
    """A RocketMQ ``broker.conf`` / ``namesrv.conf`` as the TOML tables it stands for, and each key's line."""
    from rmq.protocol import javaprops  # here: only a properties file needs it

    types = {r: {f.name: f.type for f in attrs.fields(section_class(r))} for r in ROLE_SECTIONS if r in declared()}
    try:
        return document(javaprops.parse(text), source, types)
    except javaprops.PropertiesError as e:
        raise ConfigError(f"{source}:{e.line}: {e.message}") from None
    except ConfFileError as e:
        raise ConfigError(str(e)) from None


_TABLE = re.compile(r"^\s*\[\s*([A-Za-z0-9_.-]+)\s*\]\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_-]+)\s*=")


def _toml_lines(text: str) -> dict[str, int]:
    """``{"table.key": line}`` for the plain ``key = value`` lines of ``[table]`` headers, so a start-up
    problem with a key names its line as it does for a properties file (other shapes: no line, no harm)."""
    out: dict[str, int] = {}
    table = ""
    for n, line in enumerate(text.splitlines(), 1):
        if m := _TABLE.match(line):
            table = m.group(1)
        elif (m := _KEY.match(line)) and table:
            out.setdefault(f"{table}.{m.group(1)}", n)
    return out


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RootConfig:
    """Read, override and validate; raise ``ConfigError`` with one precise line on any problem.

    With no file the embedded default applies: both roles on with defaults. A file is TOML, or RocketMQ's
    own properties (``config_format``: ``.toml``; ``.conf`` / ``.properties``; else by content).
    """
    lines: dict[str, int] = {}
    if path is None:
        doc: dict[str, Any] = embedded_default()
        source = EMBEDDED
    else:
        source = str(path)
        try:
            raw = Path(path).read_bytes()
        except OSError as e:
            raise ConfigError(f"{source}: cannot read: {e.strerror or e}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            text = raw.decode("latin-1")  # what Java's Properties.load reads; TOML must be UTF-8
            if config_format(source, text) == "toml":
                raise ConfigError(f"{source}: not UTF-8 ({e.reason} at byte {e.start})") from None
        if config_format(source, text) == "properties":
            doc, lines = _read_properties(text, source)
        else:
            try:
                doc = tomllib.loads(text)
            except tomllib.TOMLDecodeError as e:
                raise ConfigError(f"{source}: invalid TOML: {e}") from None
            lines = _toml_lines(text)
    for item in overrides:
        dotted, sep, raw_value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item}: expected section.key=value")
        _coerce_override(doc, dotted.strip(), raw_value.strip())
        lines.pop(dotted.strip(), None)  # a problem with it is the override's, not the file line's
    try:
        return structure_config(doc, source)
    except ConfigError as e:
        raise ConfigError(locate(str(e), source, lines)) from None


def _structure_table(name: str, table: Any, source: str) -> Any:
    cls = section_class(name)
    from_table = getattr(cls, "from_table", None)
    if from_table is None:
        return CONVERTER.structure(table, cls)
    try:
        return from_table(table)
    except ValueError as e:
        raise ConfigError(f"{source}: {name}: {e}") from None


def structure_config(doc: dict[str, Any], source: str = "<dict>") -> RootConfig:
    for name, aliases in ALIASES.items():  # RocketMQ's other spellings of a field (haSlaveFallbehindMax)
        table = doc.get(name)
        for old in set(aliases) & set(table) if isinstance(table, dict) else ():
            if aliases[old] in table:
                raise ConfigError(f"{source}: {name}.{old} and {name}.{aliases[old]} are one setting; keep one")
            doc[name] = table = {aliases[old] if k == old else k: v for k, v in table.items()}
    dropped = []  # RocketMQ keys that only tune Java internals, or ask for what rmq does anyway
    for name in (n for n in ROLE_SECTIONS if n in declared() and isinstance(doc.get(n), dict)):
        fields = {f.name for f in attrs.fields(section_class(name))}
        why = {k: ignored(name, k, v) for k, v in doc[name].items() if k not in fields}
        dropped += [f"{name}.{k} {w}" for k, w in why.items() if w is not None]
        doc[name] = {k: v for k, v in doc[name].items() if why.get(k) is None}
    for key in (k for k in doc if k not in KERNEL_TABLES and k not in declared()):
        if key in ROLE_SECTIONS:
            raise ConfigError(f"{source}: {_undeclared(key)}")
        raise ConfigError(f"{source}: unknown key {key!r}{did_you_mean(key, [*KERNEL_TABLES, *declared()])}")
    section = ""
    try:
        cfg = CONVERTER.structure({k: v for k, v in doc.items() if k in KERNEL_TABLES}, RootConfig)
        for section in (k for k in doc if k not in KERNEL_TABLES):
            cfg.tables[section] = _structure_table(section, doc[section], source)
    except ConfigError:
        raise
    except Exception as e:  # cattrs wraps everything in validation groups
        raise ConfigError(_render_error(e, source, section)) from None
    cfg.source, cfg.ignored = source, dropped
    if not cfg.roles():
        raise ConfigError(f"{source}: no role enabled: add a [namesrv], [controller] and/or [broker] section")
    for ns, tables in cfg.plugin.items():
        if ns not in NAMESPACES:
            raise ConfigError(f"{source}: plugin.{ns}: unknown plugin namespace{did_you_mean(ns, NAMESPACES)}")
        for name, table in tables.items():
            if not isinstance(table, dict):
                raise ConfigError(f"{source}: plugin.{ns}.{name}: expected a table")
    for role in cfg.roles():  # roles a role turns on (RocketMQ's controller inside the name server)
        for other in getattr(cfg.tables[role], "implies", tuple)():
            if cfg.tables.get(other) is None:
                cfg.tables[other] = section_class(other)()
    for table in cfg.tables.values():  # each table's own start-up rules
        problem = getattr(table, "problem", str)()
        if problem:
            raise ConfigError(f"{source}: {problem}")
    return cfg


def dump_config(cfg: RootConfig) -> str:
    """The effective config as TOML (``rmqd config``): every table with every value, defaults included,
    and the options of every selected plugin (loaded as rmqd loads it); it loads back to the same config."""
    from rmq.kernel.plugin_manager import load_plugin
    from rmq.protocol.tls import KEYS, TlsConfigError, structure_tls

    out: list[str] = [f"# effective configuration (source: {cfg.source})"]
    out += [f"# ignored: {line}" for line in cfg.ignored]

    def table(name: str, values: dict[str, Any]) -> None:
        out.append(f"\n[{name}]")
        out.extend(f"{k} = {toml_value(v)}" if v is not None else f"# {k}: unset" for k, v in values.items())

    for name in [*ROLE_SECTIONS, *sorted(set(declared()) - set(ROLE_SECTIONS))]:
        if cfg.tables.get(name) is not None:
            table(name, attrs.asdict(cfg.tables[name]))
        elif name in declared():
            why = getattr(section_class(name), "when_absent", "")
            out.append(f"\n# no [{name}] table{': ' + why if why else ''}")
    selected = cfg.selected()
    table("plugins", selected)
    for ns, names in selected.items():
        for name in names:
            options = getattr(load_plugin(ns, name, cfg.plugin_options(ns, name)).obj, "options", None)
            values = attrs.asdict(options) if attrs.has(type(options)) else cfg.plugin_options(ns, name)
            if values:
                table(f"plugin.{ns}.{name}", values)
    for ns, tables in cfg.plugin.items():  # tables of plugins not selected stay as written
        for name, values in tables.items():
            if name not in selected.get(ns, ()):
                table(f"plugin.{ns}.{name}", values)
    try:
        tls = structure_tls(cfg.tls)
    except TlsConfigError as e:
        raise ConfigError(f"{cfg.source}: tls: {e}") from None
    table("tls", {key: getattr(tls, field) for key, field in KEYS.items()})
    table("log", attrs.asdict(cfg.log))
    return "\n".join(out) + "\n"
