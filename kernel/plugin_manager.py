"""stevedore chooses, pluggy calls: entry points named in TOML become registered plugins.

Nothing is loaded because it is installed; only names the config selects. Every
failure is a ``PluginError`` with one line that names the namespace, the plugin
and what is wrong, so ``rmqd`` can refuse to start precisely.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
from collections.abc import Iterable
from typing import Any

import attrs
import pluggy
import stevedore
from stevedore.exception import NoMatches

from rmq.kernel import hookspecs
from rmq.kernel.markers import PROJECT

log = logging.getLogger("rmq.plugins")
logging.getLogger("stevedore").setLevel(logging.CRITICAL)  # failures become PluginError lines instead


class PluginError(Exception):
    """A plugin could not be found, loaded, or validated (one line, fail closed)."""


@attrs.define
class LoadedPlugin:
    namespace: str
    name: str
    obj: object
    target: str  # "module:attr"
    distribution: str


def new_plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(PROJECT)
    for mod in hookspecs.SPEC_MODULES:
        pm.add_hookspecs(mod)
    if os.environ.get("RMQ_TRACE_PLUGINS") == "1":
        trace_log = logging.getLogger("rmq.plugins.trace")

        def before(hook_name: str, impls: Any, kwargs: dict[str, Any]) -> None:
            trace_log.info("call %s(%s) -> %s", hook_name, ", ".join(kwargs), [i.plugin_name for i in impls])

        def after(outcome: Any, hook_name: str, impls: Any, kwargs: dict[str, Any]) -> None:
            exc = outcome.exception
            trace_log.info("done %s%s", hook_name, f" raised {exc!r}" if exc else "")

        pm.add_hookcall_monitoring(before, after)
    return pm


def _namespace(ns: str) -> str:
    return f"{PROJECT}.{ns}"


def available(ns: str) -> tuple[dict[str, stevedore.extension.Extension], dict[str, str]]:
    """Every installed entry point of a namespace, loaded; and those that failed, with why."""
    failures: dict[str, str] = {}

    def on_fail(_mgr: Any, ep: Any, exc: BaseException) -> None:
        failures[ep.name] = f"{getattr(ep, 'value', ep)}: {exc!r}"

    mgr = stevedore.ExtensionManager(_namespace(ns), invoke_on_load=False, on_load_failure_callback=on_fail)
    return {ext.name: ext for ext in mgr}, failures


def entry_point_names(ns: str) -> list[str]:
    from importlib.metadata import entry_points

    return sorted({ep.name for ep in entry_points(group=_namespace(ns))})


@functools.cache
def _declarers() -> dict[tuple[str, str], str]:
    """``(group, name) -> "distribution version"`` of every rmq entry point, the first installed declarer's
    (stevedore's cache drops it): one scan per process, and only the declaring distributions' metadata
    parsed, once each (rmq's carries the README: parsed per plugin it cost a daemon's start ~40 ms CPU)."""
    from importlib.metadata import distributions

    found = [(d, [(ep.group, ep.name) for ep in d.entry_points if ep.group.startswith(f"{PROJECT}.")])
             for d in distributions()]
    labels = [(f"{d.metadata['Name']} {d.version}", keys) for d, keys in reversed(found) if keys]
    return {key: label for label, keys in labels for key in keys}  # reversed: the first declarer wins


def load_plugin(ns: str, name: str, options: dict[str, Any]) -> LoadedPlugin:
    """Resolve one name through stevedore and instantiate it with its own TOML table."""
    try:
        mgr = stevedore.DriverManager(_namespace(ns), name, invoke_on_load=False, on_load_failure_callback=_raise)
    except NoMatches:
        names = entry_point_names(ns)
        raise PluginError(
            f"unknown plugin {name!r} in namespace {_namespace(ns)}; available: {', '.join(names) or '(none installed)'}"
        ) from None
    except _LoadFailure as e:
        raise PluginError(f"plugin {_namespace(ns)}:{name} ({e.target}) failed to load: {e.exc!r}") from None
    ext = mgr.extensions[0]
    target, factory = ext.entry_point_target, ext.plugin
    try:
        if inspect.ismodule(factory):
            if options:
                raise PluginError(f"plugin {_namespace(ns)}:{name} is a module and takes no options")
            obj: object = factory
        else:
            obj = factory(options)
    except PluginError:
        raise
    except Exception as e:
        raise PluginError(f"plugin {_namespace(ns)}:{name} ({target}) rejected its options: {e}") from None
    return LoadedPlugin(ns, name, obj, target, _declarers().get((_namespace(ns), name), "?"))


class _LoadFailure(Exception):
    def __init__(self, target: str, exc: BaseException) -> None:
        self.target, self.exc = target, exc


def _raise(_mgr: Any, ep: Any, exc: BaseException) -> None:
    raise _LoadFailure(getattr(ep, "value", str(ep)), exc)


def register(pm: pluggy.PluginManager, obj: object, label: str) -> None:
    """Register with pluggy and apply the fail-closed checks to this plugin's impls."""
    try:
        pm.register(obj, name=label)
    except pluggy.PluginValidationError as e:
        raise PluginError(f"plugin {label}: {e}") from None
    except ValueError as e:  # duplicate name / object
        raise PluginError(f"plugin {label}: {e}") from None
    for hookcaller in pm.get_hookcallers(obj) or []:
        for impl in hookcaller.get_hookimpls():
            if impl.plugin is obj and (
                inspect.iscoroutinefunction(impl.function) or inspect.isasyncgenfunction(impl.function)
            ):
                pm.unregister(obj)
                raise PluginError(
                    f"plugin {label}: hook {hookcaller.name} is 'async def'; hooks are synchronous "
                    "factories (return an object whose methods are async)"
                )


def check_all(pm: pluggy.PluginManager) -> None:
    """After all registrations: every impl must match a spec (typos in hook names fail closed)."""
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as e:
        plugin = pm.get_name(e.plugin) if e.plugin is not None else "?"
        raise PluginError(f"plugin {plugin}: {e}") from None


def load_selected(
    pm: pluggy.PluginManager, selection: dict[str, list[str]], options: Any
) -> list[LoadedPlugin]:
    """Load, instantiate and register every selected plugin, namespace by namespace."""
    loaded = []
    for ns, names in selection.items():
        for name in names:
            lp = load_plugin(ns, name, options(ns, name))
            register(pm, lp.obj, f"{ns}:{name}")
            loaded.append(lp)
            log.debug("loaded %s:%s from %s (%s)", ns, name, lp.target, lp.distribution)
    check_all(pm)
    return loaded


def describe(selection: dict[str, list[str]], namespaces: Iterable[str]) -> str:
    """Text for ``rmqd plugins``: every namespace, its entry points, which are selected."""
    lines = []
    for ns in namespaces:
        lines.append(f"{_namespace(ns)}:")
        exts, failures = available(ns)
        chosen = selection.get(ns, [])
        if not exts and not chosen and not failures:
            lines.append("    (none installed)")
        for name in sorted(set(exts) | set(chosen) | set(failures)):
            ext = exts.get(name)
            mark = "*" if name in chosen else " "
            if name in failures:
                lines.append(f"  {mark} {name:<22} LOAD FAILED {failures[name]}")
            elif ext is None:
                lines.append(f"  {mark} {name:<22} MISSING (selected but not installed)")
            else:
                lines.append(f"  {mark} {name:<22} {ext.entry_point_target:<52} "
                             f"[{_declarers().get((_namespace(ns), name), '?')}]")
    lines.append("(* = selected by the configuration)")
    return "\n".join(lines)

