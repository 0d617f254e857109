"""ACL helpers for tests: one rmqd with ACL, an admin and an account denied every topic but
``TopicPub`` (and every group but ``OwnGroup``), signed raw remoting requests over one connection
per identity, and a look at the store's consume-queue directories."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio

from rmq.kernel.hookspecs.processors import ProcessorRegistry
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.acl import sign
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import encode_properties
from rmq.protocol.message import decode_offset_msg_id
from rmq.testing.daemon import RmqdProcess

ADMIN = ("rocketmqadmin", "admin-secret-1")
DENIED = ("denieduser", "denied-secret-1")
WRONG = (DENIED[0], "not-the-secret")
SECRET, PUBLIC, OWN_GROUP = "Secret", "TopicPub", "OwnGroup"
BODY = b"top-secret-body"

def account(creds: tuple[str, str], admin: bool, **fields: str | list[str]) -> str:
    """One account of a plain_acl.yml: its keys, ``admin``, then ``fields`` in order (a list becomes
    a YAML list: ``topicPerms=["TopicA=PUB|SUB"]``)."""
    lines = [f"  - accessKey: {creds[0]}", f'    secretKey: "{creds[1]}"', f"    admin: {str(admin).lower()}"]
    for key, value in fields.items():
        if isinstance(value, list):
            lines += [f"    {key}:", *(f"      - {v}" for v in value)]
        else:
            lines.append(f"    {key}: {value}")
    return "\n".join(lines) + "\n"


def acl_file(*accounts: str) -> str:
    """A plain_acl.yml text with no global white list and these ``account()`` entries."""
    return "\nglobalWhiteRemoteAddresses:\naccounts:\n" + "".join(accounts)


ACCOUNTS = acl_file(account(ADMIN, True), account(DENIED, False, defaultTopicPerm="DENY", defaultGroupPerm="DENY",
                                                  topicPerms=[f"{PUBLIC}=PUB|SUB"], groupPerms=[f"{OWN_GROUP}=SUB"]))


def role_registries(store: Path, roles: tuple[str, ...] = ("broker", "namesrv", "controller"),
                    broker: dict[str, Any] | None = None) -> dict[str, ProcessorRegistry]:
    """Each role's request table as rmqd builds it from every bundled processors and auth plugin (the
    services the roles make at start are made here, not started): the permission table, in-process."""
    from importlib.metadata import entry_points

    from rmq.plugins.broker import BrokerController, BrokerPlugin
    from rmq.plugins.controller import ControllerPlugin, ControllerService
    from rmq.plugins.namesrv import NamesrvPlugin
    from rmq.plugins.namesrv.service import NamesrvService
    from rmq.testing import make_kernel

    plugins: list[Any] = [ep.load()({}) for grp in ("rmq.processors", "rmq.auth") for ep in entry_points(group=grp)]
    kernel = make_kernel(plugins, {"broker": {"storePathRootDir": str(store / "store"), **(broker or {})},
                                   "namesrv": {}, "controller": {"controllerStorePath": str(store / "controller")}})
    for p in plugins:
        if isinstance(p, BrokerPlugin):
            p.controller = BrokerController(kernel, kernel.config.broker)  # type: ignore[arg-type]
        elif isinstance(p, NamesrvPlugin):
            p.service = NamesrvService(kernel.config.namesrv)  # type: ignore[arg-type]
        elif isinstance(p, ControllerPlugin):
            p.service = ControllerService(kernel, kernel.config.controller)  # type: ignore[arg-type]
    out = {}
    for role in roles:
        reg = ProcessorRegistry(role, kernel)
        kernel.hook.rmq_processors_register(kernel=kernel, registry=reg)
        out[role] = reg
    return out


def start_acl_rmqd(rmqd_factory: Any, tmp_path: Path, **broker_conf: Any) -> RmqdProcess:
    f = tmp_path / "plain_acl.yml"
    f.write_text(ACCOUNTS)
    return rmqd_factory(broker_conf={"aclEnable": True, "plainAclFile": str(f), **broker_conf})  # type: ignore[no-any-return]


class Caller:
    """One connection of one identity (None: unsigned) to a broker."""

    def __init__(self, addr: str, creds: tuple[str, str] | None) -> None:
        self.addr, self.creds = addr, creds
        self.client = TcpRemotingClient(RemotingConfig(name=f"acl-test-{creds[0] if creds else 'anon'}"))

    async def __aenter__(self) -> Caller:
        await self.client.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.client.__aexit__(*exc)

    async def __call__(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
        cmd = RemotingCommand.request(code, dict(ext or {}), body)
        if self.creds:
            sign(cmd.ext, cmd.body, *self.creds)
        return await self.client.invoke(self.addr, cmd, 10)


def send_ext(topic: str, queue_id: int = 0, props: dict[str, str] | None = None, sys_flag: int = 0,
             group: str = "PG") -> dict[str, str]:
    """SEND_MESSAGE_V2's header (also SEND_REPLY_MESSAGE_V2's)."""
    return {"a": group, "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": str(sys_flag),
            "g": str(time.time_ns() // 1_000_000), "h": "0",
            "i": encode_properties({"UNIQ_KEY": f"U{time.time_ns()}", **(props or {})}), "j": "0", "k": "false",
            "m": "false"}


async def create_topic(admin: Caller, topic: str, queues: int = 1) -> None:
    r = await admin(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
        "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})
    assert r.code == 0, r.remark


async def create_group(admin: Caller, group: str) -> None:
    body = {"groupName": group, "consumeEnable": True, "consumeFromMinEnable": True, "consumeBroadcastEnable": True,
            "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1}
    r = await admin(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(body).encode())
    assert r.code == 0, r.remark


async def put(admin: Caller, topic: str, **kw: Any) -> tuple[int, int]:
    """Store a message as the admin: (its commit-log offset, its queue offset)."""
    r = await admin(RequestCode.SEND_MESSAGE_V2, send_ext(topic, **kw), BODY)
    assert r.code == 0, r.remark
    return decode_offset_msg_id(r.ext["msgId"])[2], int(r.ext["queueOffset"])


async def max_offset(admin: Caller, topic: str, queue_id: int = 0) -> int:
    r = await admin(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
    return int(r.ext["offset"]) if r.code == 0 else -1


async def wait_max_offset(c: Caller, topic: str, want: int, queue_id: int = 0, timeout: float = 10.0) -> None:
    """Until the queue's max offset is ``want`` (the store dispatches puts in order, asynchronously)."""
    with anyio.fail_after(timeout):
        while True:
            if await max_offset(c, topic, queue_id) == want:
                return
            await anyio.sleep(0.05)


def queue_dirs(proc: RmqdProcess, topic: str) -> set[str]:
    """The consume-queue directories of ``topic`` on disk."""
    d = proc.workdir / "store" / "consumequeue" / topic
    return {p.name for p in d.iterdir()} if d.is_dir() else set()
