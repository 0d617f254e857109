"""The bundled ``plain`` auth plugin: RocketMQ's ACL 1.0 (signed requests, accounts, permissions).

Entry point ``rmq.auth: plain``; selected for every broker, active when ``[broker] aclEnable =
true``. Accounts come from ``plainAclFile`` in RocketMQ's ``plain_acl.yml`` format (default:
``plain_acl.yml`` beside the rmqd config file, else ``<store root>/conf/plain_acl.yml``). A bad
file refuses start-up with one line naming the entry; a file changed later is reloaded (polled
every ``watch_interval_ms``, 5000 as RocketMQ; a bad edit keeps the previous accounts and logs
why). With ACL on, the interceptor replaces the loopback-only admin guard.

Also serves the ACL admin codes: UPDATE_AND_CREATE_ACL_CONFIG (50), DELETE_ACL_CONFIG (51),
GET_BROKER_CLUSTER_ACL_INFO (52), UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (53), each writing the file
atomically before it answers. Options (``[plugin.auth.plain]``): ``watch_interval_ms``.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from rmq.kernel import ConfigError, dumps, hookimpl, structure_options
from rmq.plugins.acl.accounts import AclFile, AclFileError, account_from
from rmq.plugins.acl.addresses import AddressPatternError, compile_pattern
from rmq.plugins.acl.validator import PlainAccessValidator
from rmq.protocol.access import ADMIN, AUTHORIZER, SIGNED
from rmq.protocol.codes import RequestCode, ResponseCode

if TYPE_CHECKING:
    from rmq.kernel import Connection, Kernel, ProcessorRegistry
    from rmq.protocol.command import RemotingCommand
    from rmq.roles import BrokerConfig

__all__ = ["AclFile", "PlainAccessValidator", "PlainAclPlugin", "acl_path"]

log = logging.getLogger("rmq.acl")


@attrs.define(frozen=True)
class PlainOptions:
    watch_interval_ms: int = attrs.field(default=5000)

    @watch_interval_ms.validator
    def _check(self, _a: Any, v: int) -> None:
        if v < 10:
            raise ValueError("watch_interval_ms must be >= 10")


def acl_path(cfg: BrokerConfig, source: str) -> Path:
    """Where the accounts file is: plainAclFile, else beside the config file, else under the store."""
    if cfg.plainAclFile:
        return Path(cfg.plainAclFile).expanduser()
    src = Path(source)
    if source and not source.startswith("<") and src.is_file():
        return src.parent / "plain_acl.yml"
    return cfg.store_root() / "conf" / "plain_acl.yml"


def _same_path(text: str, path: Path) -> bool:
    """Lexical comparison (no filesystem access): the request names this file or not."""
    return os.path.abspath(os.path.expanduser(text)) == os.path.abspath(path)


_AdminCode = Callable[["PlainAclPlugin", "RemotingCommand", AclFile, int], Awaitable["RemotingCommand"]]


def _with_acl(failed: int) -> Callable[[_AdminCode], Callable[..., Awaitable[RemotingCommand]]]:
    """An ACL admin code's handler: it runs with the loaded ACL file and its failure code; with ACL
    off the request is answered ``failed`` at once."""

    def wrap(handler: _AdminCode) -> Callable[..., Awaitable[RemotingCommand]]:
        @functools.wraps(handler)
        async def serve(self: PlainAclPlugin, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            acl = self.acl
            if acl is None:
                return cmd.response(failed, "ACL is not enabled on this broker (aclEnable = false)")
            return await handler(self, cmd, acl, failed)

        return serve

    return wrap


class PlainAclPlugin:
    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options: PlainOptions = structure_options(PlainOptions, options, "plugin.auth.plain")
        self.acl: AclFile | None = None
        self.validator: PlainAccessValidator | None = None
        self._broker_cfg: BrokerConfig | None = None
        self._registry: ProcessorRegistry | None = None

    def _load(self, kernel: Kernel) -> AclFile | None:
        cfg = kernel.config.broker
        if cfg is None or not cfg.aclEnable:
            return None
        if self.acl is None:
            acl = AclFile(acl_path(cfg, kernel.config.source))
            try:
                acl.load()
            except AclFileError as e:
                raise ConfigError(f"broker.plainAclFile: {e}") from None
            if acl.mtime < 0:
                log.warning("ACL is on but %s does not exist: every request is refused until accounts are added",
                            acl.path)
            self.acl = acl
        return self.acl

    @hookimpl(trylast=True)  # after every other plugin registered its codes: the table is complete
    def rmq_processors_register(self, kernel: Kernel, registry: ProcessorRegistry) -> None:
        if registry.role != "broker":
            return
        self._broker_cfg = kernel.config.broker
        self._registry = registry
        for code, fn, access in ((RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, self._update, ADMIN),
                                 (RequestCode.DELETE_ACL_CONFIG, self._delete, ADMIN),
                                 (RequestCode.GET_BROKER_CLUSTER_ACL_INFO, self._info, SIGNED),
                                 (RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, self._whites, ADMIN)):
            registry.register(code, fn, owner="acl", access=access)
        acl = self._load(kernel)
        undeclared = sorted(f"{c} ({registry.owners.get(c) or '?'})" for c, a in registry.access.items() if a is None)
        if undeclared and acl is not None:
            raise ConfigError(f"ACL is on but request codes were registered without a permission declaration "
                              f"(register(..., access=...)): {', '.join(undeclared)}")
        if undeclared:
            log.warning("request codes without a permission declaration (refused once ACL is on): %s",
                        ", ".join(undeclared))
        if acl is not None:
            self.validator = PlainAccessValidator(acl, registry.access, registry.table)
            registry.add_interceptor(self.validator)
            registry.services["acl"] = acl  # other front ends (gRPC) authenticate against the same accounts
            registry.services[AUTHORIZER] = self.validator  # post-read checks of processors
            log.info("ACL on: %d accounts, %d global white patterns from %s", len(acl.accounts),
                     len(acl.global_white), acl.path)

    @hookimpl
    def rmq_lifespan(self, kernel: Kernel) -> Any:
        if self._load(kernel) is None:  # lifespans may be entered before the broker registers processors
            return None
        return self._watch()

    @asynccontextmanager
    async def _watch(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_loop)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    async def _watch_loop(self) -> None:
        acl = self.acl
        assert acl is not None
        while True:
            await anyio.sleep(self.options.watch_interval_ms / 1000)
            if acl.stat() == acl.mtime:
                continue
            try:
                fresh = AclFile(acl.path)
                await anyio.to_thread.run_sync(fresh.load)
            except AclFileError as e:
                log.error("ACL file changed but cannot be used, keeping the previous accounts: %s", e)
                acl.mtime = acl.stat()
                continue
            acl.accounts, acl.global_white, acl.global_white_text = fresh.accounts, fresh.global_white, \
                fresh.global_white_text
            acl.counter, acl.timestamp, acl.mtime = fresh.counter, fresh.timestamp, fresh.mtime
            log.info("ACL reloaded from %s: %d accounts", acl.path, len(acl.accounts))

    # ------------------------------------------------------------------ admin codes (50-53)

    @_with_acl(ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED)
    async def _update(self, cmd: RemotingCommand, acl: AclFile, failed: int) -> RemotingCommand:
        ext = cmd.ext
        doc: dict[str, Any] = {k: ext[k] for k in ("accessKey", "secretKey", "whiteRemoteAddress", "admin",
                                                   "defaultTopicPerm", "defaultGroupPerm", "topicPerms",
                                                   "groupPerms") if ext.get(k) is not None}
        old = acl.accounts.get(doc.get("accessKey", ""))
        if old is not None:  # an update keeps what the request leaves out
            base = old.to_doc()
            base.update(doc)
            doc = base
        try:
            acct = account_from(doc, "UPDATE_AND_CREATE_ACL_CONFIG", strict=True)
        except AclFileError as e:
            return cmd.response(failed, str(e))
        acl.accounts[acct.access_key] = acct
        return await self._save(cmd, acl, failed, f"account {acct.access_key} written")

    @_with_acl(ResponseCode.DELETE_ACL_CONFIG_FAILED)
    async def _delete(self, cmd: RemotingCommand, acl: AclFile, failed: int) -> RemotingCommand:
        ak = cmd.ext.get("accessKey") or ""
        if acl.accounts.pop(ak, None) is None:
            return cmd.response(failed, f"no account with accessKey {ak!r}")
        return await self._save(cmd, acl, failed, f"account {ak} deleted")

    @_with_acl(ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED)
    async def _whites(self, cmd: RemotingCommand, acl: AclFile, failed: int) -> RemotingCommand:
        target = cmd.ext.get("aclFileFullPath") or ""
        if target and not _same_path(target, acl.path):
            return cmd.response(failed, f"aclFileFullPath {target!r} is not this broker's ACL file")
        texts = [w.strip() for w in (cmd.ext.get("globalWhiteAddrs") or "").split(",") if w.strip()]
        try:
            matchers = [compile_pattern(w) for w in texts]
        except AddressPatternError as e:
            return cmd.response(failed, f"globalWhiteAddrs: {e}")
        acl.global_white_text, acl.global_white = texts, matchers
        return await self._save(cmd, acl, failed, "global white list written")

    async def _save(self, cmd: RemotingCommand, acl: AclFile, failed: int, what: str) -> RemotingCommand:
        try:
            await anyio.to_thread.run_sync(acl.save)
        except OSError as e:
            log.error("cannot write %s: %s", acl.path, e)
            return cmd.response(failed, f"cannot write the ACL file: {e.strerror or e}")
        log.info("ACL: %s (%s, version %d)", what, acl.path, acl.counter)
        return cmd.response(ResponseCode.SUCCESS)

    @_with_acl(ResponseCode.SYSTEM_ERROR)
    async def _info(self, cmd: RemotingCommand, acl: AclFile, failed: int) -> RemotingCommand:
        cfg = self._broker_cfg
        assert cfg is not None
        version = dumps(acl.data_version())
        addr = f"{cfg.brokerIP1 or '127.0.0.1'}:{cfg.listenPort}"
        return cmd.response(ResponseCode.SUCCESS, None, {
            "version": version, "allAclFileVersion": dumps({str(acl.path): acl.data_version()}),
            "brokerName": cfg.brokerName, "brokerAddr": addr, "clusterName": cfg.brokerClusterName})
