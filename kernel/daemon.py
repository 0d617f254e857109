"""``rmqd``: one daemon for the NameServer role, the Broker role, or both.

    rmqd                       embedded default: namesrv + broker, default ports, ./rmq-store
    rmqd --config rmqd.toml    roles and plugins from TOML
    rmqd --config broker.conf  RocketMQ's own broker.conf / namesrv.conf (Java properties), as they are
    rmqd plugins               every namespace, installed entry points, which are selected
    rmqd config                the effective configuration as TOML (``--format toml``), whatever the file's format

A declared table may make this process a supervisor of child rmqd processes (the broker's, to use every
core): its ``supervisor(config, argv)`` returns an object with ``own`` (the config this process serves
itself), ``run()`` (an async context manager that starts the children and returns once all serve) and
``describe()`` (their ports, for the ready line); its ``worker(config, k)`` is the config child ``k``
(``rmqd ... --worker k``) serves.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import logging
import os
import signal
import sys
import time
from typing import Any

import anyio

from rmq import __version__
from rmq.kernel.config import EMBEDDED, NAMESPACES, ConfigError, RootConfig, dump_config, load_config
from rmq.kernel.net import port_holder
from rmq.kernel.plugin_manager import PluginError, describe
from rmq.protocol.ports import BindError
from rmq.protocol.storepath import SERVING as CODEC  # "compiled; store compiled"

log = logging.getLogger("rmq.daemon")


class _Formatter(logging.Formatter):
    """One line per event: time, level, [worker,] logger, message (exceptions folded onto the line)."""

    def __init__(self, tag: str = "") -> None:
        super().__init__()
        self.tag = tag  # a supervisor's children share its stderr: each line says whose it is

    def format(self, record: logging.LogRecord) -> str:
        t = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(record.created))
        msg = record.getMessage()
        if record.exc_info:
            msg += " | " + self.formatException(record.exc_info).replace("\n", " | ")
        return f"{t}.{int(record.msecs):03d} {record.levelname:<5} {self.tag}{record.name}: {msg}"


def setup_logging(level: str, tag: str = "") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(tag))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    try:
        root.setLevel(level.upper())
    except ValueError:
        raise ConfigError(f"log.level: unknown level {level!r}; use DEBUG, INFO, WARNING or ERROR") from None
    logging.getLogger("stevedore").setLevel(logging.CRITICAL)  # we report plugin problems ourselves


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rmqd", description="rmq daemon: RocketMQ NameServer and/or Broker")
    p.add_argument("command", nargs="?", default="run", choices=["run", "plugins", "config"])
    p.add_argument("-c", "--config", help="TOML file, or RocketMQ's broker.conf / namesrv.conf (.conf, .properties: "
                                          "Java properties); default: embedded namesrv + broker")
    p.add_argument("--format", choices=["toml"], default="toml", help="what `rmqd config` prints (default: toml)")
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
        help="override one setting, e.g. --set broker.listenPort=10921 (repeatable)",
    )
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR (overrides [log] level)")
    p.add_argument("--worker", type=int, metavar="K",
                   help="serve (or, with `config`, print the configuration of) child K of a config that runs "
                        "several broker processes; the supervisor starts its children so")
    p.add_argument("--version", action="version", version=f"rmqd {__version__}")
    return p


async def _run(config: RootConfig, argv: list[str], worker: int | None = None) -> None:
    from contextlib import AsyncExitStack

    from rmq.kernel.kernel import Kernel

    supervisor = None if worker is not None else _supervisor(config, argv)
    own = supervisor.own if supervisor is not None else config
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with AsyncExitStack() as stack:
            kernel = await stack.enter_async_context(Kernel.from_config(own)) if own.roles() else None
            if supervisor is not None:
                await stack.enter_async_context(supervisor.run())
            # Start-up objects (plugins, tables, mmaps) live forever: keep the cyclic GC from rescanning
            # them on every collection; measured ~5x cheaper allocation on the put path.
            gc.freeze()
            own_ports = kernel.ports if kernel is not None else {}
            ports = ", ".join(f"{name} {port}" for name, port in own_ports.items())
            if worker is not None:  # what the supervisor waits for (never a " ready: " line: that is its own)
                log.info("rmqd %s worker %d serving: pid %d, ports %s", __version__, worker, os.getpid(), ports)
                sys.stdout.write(json.dumps({"worker": worker, "pid": os.getpid(), "ports": own_ports}) + "\n")
                sys.stdout.flush()
            else:
                if supervisor is not None:
                    ports = ", ".join([*([ports] if ports else []), supervisor.describe()])
                log.info("rmqd %s ready: roles %s, pid %d, ports %s; codec %s%s", __version__,
                         "+".join(config.roles()), os.getpid(), ports or "(none)", CODEC, _exposure(config))
            async for signum in signals:
                log.info("received %s, shutting down", signal.Signals(signum).name)
                break
    log.info("rmqd stopped")


def _supervisor(config: RootConfig, argv: list[str]) -> Any:
    """The first table's supervisor of child daemons (the broker's, when it runs several), else None."""
    found = (getattr(table, "supervisor", lambda *_: None)(config, argv) for table in config.tables.values())
    return next((supervisor for supervisor in found if supervisor is not None), None)


def _as_worker(config: RootConfig, k: int) -> RootConfig:
    """``config`` as a supervisor's child ``k`` serves it (the table that supervises derives it)."""
    for table in config.tables.values():
        if hasattr(table, "worker") and getattr(table, "supervisor", lambda *_: None)(config, []) is not None:
            try:
                return table.worker(config, k)  # type: ignore[no-any-return]
            except ValueError as e:
                raise ConfigError(f"--worker {k}: {e}") from None
    raise ConfigError(f"--worker {k}: this configuration starts no child daemons")


def _child_argv(args: argparse.Namespace) -> list[str]:
    """The arguments a supervisor's children start with: this process's config, overrides and log level."""
    out = ["--config", os.path.abspath(args.config)] if args.config else []
    for item in args.overrides:
        out += ["--set", item]
    return out + (["--log-level", args.log_level] if args.log_level else [])


def _exposure(config: RootConfig) -> str:
    """What the start-up line says about who can reach this daemon."""
    hosts = sorted({getattr(config, role).listenHost for role in config.roles()})
    if config.source == EMBEDDED and all(h.startswith("127.") for h in hosts):
        return (f"; embedded default: listening on {', '.join(hosts)} only "
                "(give a --config, or --set <role>.listenHost=0.0.0.0, to serve other hosts)")
    return f"; listening on {', '.join(h or '*' for h in hosts)}"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = load_config(args.config, args.overrides)
        if args.worker is not None:
            config = _as_worker(config, args.worker)
        setup_logging(args.log_level or config.log.level,
                      f"[{config.broker.brokerName}] " if args.worker is not None and config.broker else "")
        if config.ignored:  # never silent: one line; `rmqd config` says why for each
            log.info("%s: %d RocketMQ keys accepted and ignored (Java internals, or what rmq does anyway): %s",
                     config.source, len(config.ignored), ", ".join(i.split(" ", 1)[0] for i in config.ignored))
        if args.command == "config":
            sys.stdout.write(dump_config(config))
            return 0
        if args.command == "plugins":
            print(describe(config.selected(), NAMESPACES))
            return 0
        backend_options = {"use_uvloop": importlib.util.find_spec("uvloop") is not None}
        anyio.run(_run, config, _child_argv(args), args.worker, backend="asyncio", backend_options=backend_options)
        return 0
    except (ConfigError, PluginError) as e:
        if isinstance(e, BindError) and e.in_use:  # who holds the port, when /proc tells
            e = e.held_by(port_holder(e.port), os.getpid())
        print(f"rmqd: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
