"""The dashboard's backend: the daemon seen as a client sees it.

Each page's calls go through ``rmq.client`` clients (an ``Admin``, a producer, a pull consumer) started
once per set of credentials, so every change the dashboard makes is an ordinary, signed client request
the broker checks like any other. The backend also owns what a page needs besides the cluster: HTTP Basic
against the ACL's accounts, the CSRF tokens, the loopback rule for admin changes without ACL, and a
once-a-second sample of the store's counters for the TPS chart. Nothing here knows HTTP: a refusal is a
:class:`Refused` (status, message) the app renders.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import ipaddress
import logging
import secrets
import time
from collections import deque
from typing import Any

import anyio

from rmq.client import Admin, Producer, PullConsumer
from rmq.protocol.message import decode_offset_msg_id

log = logging.getLogger("rmq.dashboard")

Creds = tuple[str, str] | None


def _addr_key(host: str, port: int) -> tuple[str, int]:
    host = host.strip("[]")
    try:
        host = str(ipaddress.ip_address(host.split("%")[0]))
    except ValueError:
        host = host.lower()
    return host, port


class Refused(Exception):
    """A request the dashboard answers with an error page (status, message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Session:
    """One request's clients (the credentials' own) and its form."""

    def __init__(self, backend: Backend, creds: Creds, user: str, form: dict[str, str], csrf: str = "") -> None:
        self.backend, self.creds, self.user, self.form, self.csrf = backend, creds, user, form, csrf

    async def admin(self) -> Admin:
        return await self.backend.client("admin", self.creds)  # type: ignore[no-any-return]

    async def producer(self) -> Producer:
        return await self.backend.client("producer", self.creds)  # type: ignore[no-any-return]

    async def puller(self) -> PullConsumer:
        return await self.backend.client("puller", self.creds)  # type: ignore[no-any-return]


class Backend:
    """The daemon seen as a client sees it, plus a once-a-second sample of the store's counters."""

    def __init__(self, broker: Any, namesrv: list[str], *, acl_on: bool, accounts: Any) -> None:
        self.broker = broker
        self.namesrv = namesrv
        self.acl_on = acl_on
        self.accounts = accounts
        self.samples: deque[tuple[float, int, int]] = deque(maxlen=301)
        self._clients: dict[tuple[str, Creds], Any] = {}
        self._lock = asyncio.Lock()
        self._csrf_key = secrets.token_bytes(32)  # per process: a restart asks browsers to reload forms

    def csrf_token(self, user: str) -> str:
        """A fresh token: a random nonce and its MAC under this process's key, bound to the account."""
        nonce = secrets.token_urlsafe(18)
        return f"{nonce}.{self._csrf_mac(nonce, user)}"

    def csrf_valid(self, token: str, user: str) -> bool:
        nonce, sep, mac = token.partition(".")
        return bool(sep and nonce and len(token) < 200) and hmac.compare_digest(
            mac.encode("utf-8", "surrogatepass"), self._csrf_mac(nonce, user).encode())  # bytes: any text

    def _csrf_mac(self, nonce: str, user: str) -> str:
        digest = hmac.new(self._csrf_key, f"{nonce}\0{user}".encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    async def broker_addr(self, admin: Admin, offset_id: str) -> str:
        """The address ``offset_id`` encodes, if it is one of a broker the name server lists (an offset id
        names any ip:port: looking it up unchecked lets a stranger aim signed requests anywhere);
        ValueError for a malformed id, Refused(400) for an address outside the cluster."""
        ip, port, _ = decode_offset_msg_id(offset_id)
        want = _addr_key(ip, port)
        info = await admin.cluster_info()
        for addrs in info.brokers.values():
            for addr in addrs.values():
                host, _, p = str(addr).rpartition(":")
                if p.isdigit() and _addr_key(host, int(p)) == want:
                    return str(addr)
        raise Refused(400, f"message id {offset_id} names {ip}:{port}, which is not a broker of this cluster: "
                           "the dashboard only asks the brokers the name server lists")

    async def client(self, kind: str, creds: Creds) -> Any:
        """Started once per kind and credentials (accounts are few: only valid ones get here)."""
        key = (kind, creds)
        async with self._lock:
            c = self._clients.get(key)
            if c is None or not c.started:
                if not self.namesrv:
                    raise Refused(503, "the broker knows no name server: the dashboard needs one")
                opts: dict[str, Any] = {"credentials": creds, "instance_name": f"dashboard-{len(self._clients)}"}
                if kind == "admin":
                    c = Admin(self.namesrv, **opts)
                elif kind == "producer":
                    c = Producer("TOOLS_PRODUCER", self.namesrv, **opts)
                else:
                    c = PullConsumer("TOOLS_CONSUMER", self.namesrv, **opts)
                await c.start()
                self._clients[key] = c
            return c

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            try:
                with anyio.move_on_after(5, shield=True):
                    await c.shutdown()
            except Exception as e:  # closing is best effort
                log.debug("dashboard client shutdown: %s", e)

    def authenticate(self, header: str | None) -> tuple[Creds, str]:
        """(credentials for the client calls, user name shown); Refused(401) when ACL wants them."""
        if not self.acl_on:
            return None, ""
        if self.accounts is None:
            raise Refused(503, "ACL is on but its accounts are not available to the dashboard")
        scheme, _, token = (header or "").partition(" ")
        if scheme.lower() != "basic" or not token:
            raise Refused(401, "log in with an ACL account's accessKey and secretKey")
        try:
            ak, sep, sk = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise Refused(401, "malformed Basic credentials") from None
        acct = self.accounts.accounts.get(ak) if sep and ak else None
        if acct is None or not hmac.compare_digest(str(acct.secret_key).encode(), sk.encode()):
            raise Refused(401, "unknown accessKey or wrong secretKey")
        return (ak, sk), ak

    def check_admin_peer(self, host: str) -> None:
        """Without ACL the broker takes admin requests from loopback peers only (unless allowRemoteAdmin):
        the dashboard, itself a loopback peer, must not lend that to a remote browser."""
        if self.acl_on or getattr(self.broker.config, "allowRemoteAdmin", False):
            return
        try:
            ip = ipaddress.ip_address(host.split("%")[0])
            mapped = getattr(ip, "ipv4_mapped", None)
            local = ip.is_loopback or (mapped is not None and mapped.is_loopback)
        except ValueError:
            local = False
        if not local:
            raise Refused(403, f"changes from {host} are refused: the broker takes them from loopback only "
                               "(enable ACL, or set broker.allowRemoteAdmin = true)")

    def sample(self) -> None:
        s = self.broker.store.stats() or {}
        self.samples.append((time.time(), int(s.get("puts", 0)), int(s.get("get_messages", 0))))

    async def sample_forever(self) -> None:
        while True:
            try:
                self.sample()
            except Exception as e:  # figures are informative only
                log.debug("dashboard stats sample failed: %s", e)
            await asyncio.sleep(1.0)

    def tps_series(self) -> list[tuple[int, float, float]]:
        pts = list(self.samples)
        return [(int(b[0] * 1000), max(0.0, (b[1] - a[1]) / (b[0] - a[0])), max(0.0, (b[2] - a[2]) / (b[0] - a[0])))
                for a, b in zip(pts, pts[1:], strict=False) if b[0] > a[0]]
