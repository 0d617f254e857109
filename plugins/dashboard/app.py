"""The dashboard's Starlette app: the request guards and the pages (the backend, an ``rmq.client`` of the
daemon it runs in, is ``backend``).

Every request first passes ``HostGuard`` (a Host header the dashboard was not configured for is answered
421: a DNS-rebound name is same-origin to the browser, so only the Host tells it apart). Every page handler
then runs under ``_page``: HTTP Basic against the ACL's accounts when ACL is on, on every POST a same-origin
check and a CSRF token (a browser that holds Basic credentials would otherwise send them with a cross-site
form), time limits for the form and the page, and every failure rendered as an escaped error page: a
request never reaches the broker except as a client request, and never raises into the event loop.
Message lookups by offset id only reach brokers the name server lists (the id names any ip:port).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import anyio
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from rmq.client import Admin, BrokerError, ClientError, Message, PullStatus
from rmq.plugins.dashboard import host_allowed
from rmq.plugins.dashboard.backend import Backend, Refused, Session
from rmq.plugins.dashboard.templates import CSS, JS, render
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingError
from rmq.protocol.names import DLQ_PREFIX, RETRY_PREFIX, SYSTEM_TOPICS

log = logging.getLogger("rmq.dashboard")

Handler = Callable[[Request, "Session"], Awaitable[Response]]

REQUEST_LIMIT = 20.0  # seconds for one page's client calls
FORM_LIMIT = 30.0  # seconds to receive a form's body (the listener's bodyTimeout closes slower ones too)
CSRF_COOKIE, CSRF_FIELD = "rmq_csrf", "csrf"
MAX_FORM = 1 << 20  # bytes of a form body (a test message's body included)
MAX_LIST = 64  # messages shown by one browse
SYSTEM_GROUPS = frozenset(("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP",
                           "CID_ONSAPI_OWNER", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_PULL", "CID_RMQ_SYS_TRANS"))
DROP_ON_RESEND = frozenset(("UNIQ_KEY", "MIN_OFFSET", "MAX_OFFSET", "REAL_TOPIC", "REAL_QID", "DELAY",
                            "TRAN_MSG", "PGROUP", "CONSUME_START_TIME", "RECONSUME_TIME", "MAX_RECONSUME_TIMES",
                            "CLUSTER", "TIMER_DELIVER_MS", "TIMER_DELAY_MS", "TIMER_OUT_MS"))
PERMS = {"6": "read/write", "4": "read only", "2": "write only"}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


# ---------------------------------------------------------------------------------------------- plumbing


class HostGuard:
    """ASGI middleware: any request whose Host header is not an allowed one is answered 421 before any
    handler runs (a page on a rebound DNS name is same-origin to the browser; its Host still names it).
    A head larger than ``max_head`` is answered 431 (h11 bounds only a head that arrives in pieces)."""

    def __init__(self, app: ASGIApp, allowed: frozenset[tuple[str, int | None]], max_head: int) -> None:
        self.app, self.allowed, self.max_head = app, allowed, max_head

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = scope["headers"]
            size = len(scope.get("raw_path", b"")) + len(scope["query_string"]) + sum(len(k) + len(v) + 4
                                                                                      for k, v in headers)
            hosts = [v for k, v in headers if k == b"host"]
            resp = None
            if size > self.max_head:
                resp = PlainTextResponse("431 Request Header Fields Too Large\n", status_code=431)
            elif len(hosts) != 1 or not host_allowed(hosts[0].decode("latin-1"), self.allowed):
                resp = PlainTextResponse("421 Misdirected Request: this dashboard does not serve that Host name "
                                         "([dashboard] allowedHosts)\n", status_code=421)
            if resp is not None:
                resp.headers["Connection"] = "close"
                await _headers(resp)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _same_origin(request: Request) -> bool:
    """A POST from a page of this dashboard (or from a non-browser client, which sends no Origin)."""
    host = request.headers.get("host", "")
    origin = request.headers.get("origin")
    if origin is None:
        referer = request.headers.get("referer")
        if referer is None:
            return request.headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")
        origin = referer
    if origin == "null":
        return False
    return urlsplit(origin).netloc == host


async def _form(request: Request) -> dict[str, str]:
    if request.method != "POST":
        return {}
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/x-www-form-urlencoded":
        raise Refused(415, "forms are sent as application/x-www-form-urlencoded")
    body = b""
    try:
        with anyio.fail_after(FORM_LIMIT):
            async for chunk in request.stream():
                body += chunk
                if len(body) > MAX_FORM:
                    raise Refused(413, f"form larger than {MAX_FORM} bytes")
    except TimeoutError:
        raise Refused(408, f"form not received within {FORM_LIMIT:g} s") from None
    except ClientDisconnect:
        raise Refused(400, "the client left before its form arrived") from None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(400, "form is not UTF-8") from None
    return {k: v[0] for k, v in parse_qs(text, keep_blank_values=True, max_num_fields=64).items()}


def _headers(resp: Response) -> Response:
    for k, v in HEADERS.items():
        resp.headers.setdefault(k, v)
    return resp


def _error(status: int, message: str, user: str = "") -> Response:
    resp = HTMLResponse(render("error.html", status=status, message=message, user=user, title="Error"),
                        status_code=status)
    if status == 401:
        resp.headers["WWW-Authenticate"] = 'Basic realm="rmq dashboard", charset="UTF-8"'
    if status in (400, 408, 413):  # a body may be left unread: nothing more is read on this connection
        resp.headers["Connection"] = "close"
    return _headers(resp)


def _csrf(backend: Backend, request: Request, user: str, form: dict[str, str]) -> tuple[str, bool]:
    """(this browser's token, whether to set its cookie). A POST must carry the cookie's token in its form
    (double submit, signed and bound to the account): a page of another site can make the browser send the
    cookie, never read it."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    valid = backend.csrf_valid(cookie, user)
    if request.method == "POST":
        sent = form.get(CSRF_FIELD, "")
        if not (valid and sent and hmac.compare_digest(sent.encode(), cookie.encode())):
            raise Refused(403, "missing or stale form token: reload the page and submit the form again")
    return (cookie, False) if valid else (backend.csrf_token(user), True)


def _page(backend: Backend, fn: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        user = ""
        try:
            creds, user = backend.authenticate(request.headers.get("authorization"))
            if request.method == "POST":
                if not _same_origin(request):
                    raise Refused(403, "cross-origin form refused")
                backend.check_admin_peer(request.client.host if request.client else "")
            form = await _form(request)
            token, fresh = _csrf(backend, request, user, form)
            with anyio.fail_after(REQUEST_LIMIT):
                resp = await fn(request, Session(backend, creds, user, form, token))
            if fresh:
                resp.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict", path="/")
        except Refused as e:
            return _error(e.status, str(e), user)
        except TimeoutError:
            return _error(504, f"no answer within {REQUEST_LIMIT:g} s", user)
        except BrokerError as e:
            return _error(502, f"broker refused: {e}", user)
        except (ClientError, RemotingError, OSError) as e:
            return _error(502, f"{type(e).__name__}: {e}", user)
        except ValueError as e:
            return _error(400, str(e), user)
        except Exception as e:  # a page must never take anything else down
            log.exception("dashboard: %s %s failed", request.method, request.url.path)
            return _error(500, f"internal error: {type(e).__name__}", user)
        return _headers(resp)

    return endpoint


def _html(template: str, s: Session, /, **ctx: Any) -> HTMLResponse:
    return HTMLResponse(render(template, user=s.user, csrf=s.csrf, **ctx))


def _see_other(path: str, **query: str) -> RedirectResponse:
    qs = "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
    return RedirectResponse(f"{path}?{qs}" if qs else path, status_code=303)


def _field(form: dict[str, str], name: str, *, required: bool = True, default: str = "") -> str:
    v = form.get(name, default).strip()
    if required and not v:
        raise Refused(400, f"{name} is required")
    return v


def _int(text: str, name: str, lo: int, hi: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise Refused(400, f"{name}: expected a whole number, got {text[:40]!r}") from None
    if not lo <= v <= hi:
        raise Refused(400, f"{name}: expected {lo}..{hi}, got {v}")
    return v


def parse_time(text: str, name: str) -> int:
    """Epoch ms, or an ISO date-time (``<input type=datetime-local>``) in the server's local time."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise Refused(400, f"{name}: expected epoch ms or YYYY-MM-DDTHH:MM[:SS], got {text[:40]!r}") from None


def fmt_ms(ms: int) -> str:
    if ms <= 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def message_view(m: Any) -> dict[str, Any]:
    """What a page shows of a stored message (all text, escaped by the template)."""
    body = bytes(m.body or b"")
    try:
        text, binary = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, binary = body.decode("utf-8", "replace"), True
    return {"topic": m.topic, "msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "tags": m.tags or "",
            "keys": m.keys or "", "queueId": m.queue_id, "queueOffset": m.queue_offset,
            "born": fmt_ms(m.born_timestamp), "stored": fmt_ms(m.store_timestamp), "bornHost": m.born_host,
            "storeHost": m.store_host, "reconsumeTimes": m.reconsume_times, "size": len(body),
            "properties": sorted((str(k), str(v)) for k, v in dict(m.properties).items()),
            "body": text, "binary": binary, "store_ms": m.store_timestamp}


async def _masters(admin: Admin) -> list[str]:
    addrs = (await admin.cluster_info()).master_addrs()
    if not addrs:
        raise Refused(503, "no master broker registered with the name server")
    return addrs


# ---------------------------------------------------------------------------------------------- pages


async def cluster_page(request: Request, s: Session) -> Response:
    admin = await s.admin()
    info = await admin.cluster_info()
    rows = []
    for cluster, names in sorted(info.clusters.items()):
        for name in sorted(names):
            for bid, addr in sorted(info.brokers.get(name, {}).items()):
                try:
                    rt = await admin.broker_runtime_info(addr)
                    problem = ""
                except (ClientError, RemotingError, OSError) as e:
                    rt, problem = {}, str(e)
                rows.append({"cluster": cluster, "name": name, "id": bid, "addr": addr, "rt": rt,
                             "problem": problem})
    return _html("cluster.html", s, title="Cluster", rows=rows, namesrv=s.backend.namesrv)


async def api_stats(request: Request, s: Session) -> Response:
    series = s.backend.tps_series()
    last = series[-1] if series else (int(time.time() * 1000), 0.0, 0.0)
    return JSONResponse({"putTps": round(last[1], 2), "getTps": round(last[2], 2),
                         "points": [[t, round(p, 2), round(g, 2)] for t, p, g in series[-120:]]})


async def topics_page(request: Request, s: Session) -> Response:
    admin = await s.admin()
    show_system = request.query_params.get("system") == "1"
    topics = await admin.list_topics()
    rows = []
    for t in topics:
        system = t in SYSTEM_TOPICS or t.startswith((RETRY_PREFIX, DLQ_PREFIX, "rmq_sys_", "RMQ_SYS_"))
        if system and not show_system:
            continue
        rows.append({"name": t, "kind": "retry" if t.startswith(RETRY_PREFIX) else "dlq" if t.startswith(DLQ_PREFIX)
                     else "system" if system else "normal"})
    return _html("topics.html", s, title="Topics", rows=rows, show_system=show_system, perms=PERMS)


async def topic_page(request: Request, s: Session) -> Response:
    name = request.query_params.get("name", "")
    if not name:
        raise Refused(400, "name is required")
    admin = await s.admin()
    try:
        route = await admin.topic_route(name)
    except (ClientError, RemotingError) as e:
        raise Refused(404, f"topic {name!r}: {e}") from None
    stats = []
    for st in await admin.topic_stats(name):
        stats.append({"broker": st.queue.broker_name, "queue": st.queue.queue_id, "min": st.min_offset,
                      "max": st.max_offset, "last": fmt_ms(st.last_update_timestamp)})
    qd = route.queue_datas[0] if route.queue_datas else None
    return _html("topic.html", s, title=f"Topic {name}", name=name, route=route, stats=stats, qd=qd,
                 total=sum(r["max"] - r["min"] for r in stats), perms=PERMS)


async def topic_save(request: Request, s: Session) -> Response:
    f = s.form
    topic = _field(f, "topic")
    queues = _int(_field(f, "queues", default="8"), "queues", 1, 1024)
    perm = _field(f, "perm", default="6")
    if perm not in PERMS:
        raise Refused(400, f"perm: one of {', '.join(PERMS)}")
    admin = await s.admin()
    await admin.create_topic(topic, queues, perm=int(perm), order=f.get("order") == "on", wait=3.0)
    return _see_other("/topic", name=topic)


async def topic_delete(request: Request, s: Session) -> Response:
    topic = _field(s.form, "topic")
    await (await s.admin()).delete_topic(topic)
    return _see_other("/topics")


async def _groups(admin: Admin, masters: list[str]) -> dict[str, dict[str, Any]]:
    """Subscription groups of every master: name -> config (the first broker's)."""
    out: dict[str, dict[str, Any]] = {}
    for addr in masters:
        resp = await admin.instance.invoke(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {},
                                           what="subscription groups")
        table = json.loads(resp.body or b"{}").get("subscriptionGroupTable") or {}
        if isinstance(table, dict):
            for name, cfg in table.items():
                out.setdefault(str(name), cfg if isinstance(cfg, dict) else {})
    return out


async def _connections(admin: Admin, group: str, masters: list[str]) -> dict[str, Any]:
    """GET_CONSUMER_CONNECTION_LIST merged over the masters (no connections when no consumer is online)."""
    doc: dict[str, Any] = {"connectionSet": [], "subscriptionTable": {}}
    for addr in masters:
        try:
            resp = await admin.instance.invoke(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                               {"consumerGroup": group}, what="consumer connections")
        except BrokerError as e:
            if e.code in (ResponseCode.CONSUMER_NOT_ONLINE, ResponseCode.SYSTEM_ERROR):
                continue
            raise
        part = json.loads(resp.body or b"{}")
        doc["connectionSet"] += part.get("connectionSet") or []
        doc["subscriptionTable"].update(part.get("subscriptionTable") or {})
        for k in ("consumeType", "messageModel", "consumeFromWhere"):
            doc.setdefault(k, part.get(k, ""))
    return doc


async def groups_page(request: Request, s: Session) -> Response:
    admin = await s.admin()
    show_system = request.query_params.get("system") == "1"
    masters = await _masters(admin)
    rows = []
    for name, cfg in sorted((await _groups(admin, masters)).items()):
        if not show_system and (name in SYSTEM_GROUPS or name.startswith("CID_RMQ_SYS_")):
            continue
        conns = await _connections(admin, name, masters)
        lag = sum(p.lag for p in await admin.consumer_progress(name))
        rows.append({"name": name, "clients": len(conns["connectionSet"]), "lag": lag,
                     "mode": conns.get("messageModel", ""), "orderly": bool(cfg.get("consumeMessageOrderly")),
                     "enabled": cfg.get("consumeEnable", True), "retry": cfg.get("retryMaxTimes", "")})
        if len(rows) >= 500:
            break
    return _html("groups.html", s, title="Consumer groups", rows=rows, show_system=show_system)


async def group_page(request: Request, s: Session) -> Response:
    name = request.query_params.get("name", "")
    if not name:
        raise Refused(400, "name is required")
    admin = await s.admin()
    masters = await _masters(admin)
    groups = await _groups(admin, masters)
    conns = await _connections(admin, name, masters)
    progress = await admin.consumer_progress(name)
    if name not in groups and not progress and not conns["connectionSet"]:
        raise Refused(404, f"no consumer group {name!r}")
    rows = [{"topic": p.queue.topic, "broker": p.queue.broker_name, "queue": p.queue.queue_id,
             "brokerOffset": p.max_offset, "consumerOffset": p.committed, "lag": p.lag,
             "last": fmt_ms(p.last_timestamp)} for p in progress]
    topics = sorted({r["topic"] for r in rows} | set(conns["subscriptionTable"]))
    topics = [t for t in topics if not t.startswith(RETRY_PREFIX)] or topics
    return _html("group.html", s, title=f"Group {name}", name=name, cfg=groups.get(name, {}), rows=rows,
                 lag=sum(r["lag"] for r in rows), conns=conns, topics=topics,
                 reset=request.query_params.get("reset", ""))


async def group_save(request: Request, s: Session) -> Response:
    f = s.form
    group = _field(f, "group")
    retry = _int(_field(f, "retryMaxTimes", default="16"), "retryMaxTimes", 0, 1000)
    doc = {"groupName": group, "consumeEnable": f.get("consumeEnable", "on") == "on",
           "consumeBroadcastEnable": True, "retryMaxTimes": retry,
           "consumeMessageOrderly": f.get("orderly") == "on"}
    admin = await s.admin()
    for addr in await _masters(admin):
        await admin.instance.invoke(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                                    json.dumps(doc).encode(), what=f"create group {group}")
    return _see_other("/group", name=group)


async def group_reset(request: Request, s: Session) -> Response:
    f = s.form
    group, topic = _field(f, "group"), _field(f, "topic")
    ts = parse_time(_field(f, "ts", required=False) or _field(f, "when"), "when")
    result = await (await s.admin()).reset_offset_by_timestamp(group, topic, ts)
    summary = ", ".join(f"{mq.broker_name}/{mq.queue_id}→{off}" for mq, off in sorted(result.items()))
    return _see_other("/group", name=group, reset=f"{topic} reset to {fmt_ms(ts)}: {summary or 'no queues'}")


async def message_page(request: Request, s: Session) -> Response:
    q = request.query_params
    msg_id, topic = q.get("id", "").strip(), q.get("topic", "").strip()
    found = None
    if msg_id:
        admin = await s.admin()
        try:
            found = await _by_id(s, admin, topic, msg_id) if topic else await _view(s, admin, msg_id)
        except ValueError:
            raise Refused(400, f"{msg_id!r} is not a message id (give the topic to look up a client msgId)") from None
        except (ClientError, BrokerError) as e:
            raise Refused(404, str(e)) from None
    return _html("message.html", s, title="Message", msg_id=msg_id, topic=topic,
                 m=message_view(found) if found else None)


async def _view(s: Session, admin: Admin, offset_id: str) -> Any:
    """The message at an offset id, asked of its broker only if the cluster lists that broker."""
    await s.backend.broker_addr(admin, offset_id)
    return await admin.view_message(offset_id)


async def _by_id(s: Session, admin: Admin, topic: str, msg_id: str) -> Any:
    """By client msgId (UNIQ_KEY, through the topic's routes) or by offset id (checked as in ``_view``)."""
    if len(msg_id) in (32, 56):
        found = await admin.query_message(topic, msg_id, unique_key=True)
        if found:
            return found[0]
        try:
            return await _view(s, admin, msg_id)
        except (Refused, ClientError, RemotingError, ValueError):
            pass
    raise ClientError(f"message {msg_id} not found in {topic!r}")


async def _browse(s: Session, topic: str, begin: int | None, end: int | None, newest: bool) -> list[Any]:
    """Up to MAX_LIST messages of ``topic``: stored in [begin, end], or the newest ones."""
    puller = await s.puller()
    out: list[Any] = []
    for mq in await puller.fetch_queues(topic):
        lo, hi = await puller.min_offset(mq), await puller.max_offset(mq)
        if newest:
            offset = max(lo, hi - MAX_LIST)
        else:
            assert begin is not None and end is not None
            offset = max(lo, await puller.search_offset(mq, begin))
        for _ in range(8):  # bounded work per queue
            if offset >= hi:
                break
            r = await puller.pull(mq, offset, 32)
            if r.status is not PullStatus.FOUND or not r.messages:
                break
            past = False
            for m in r.messages:
                if begin is not None and m.store_timestamp < begin:
                    continue
                if end is not None and m.store_timestamp > end:
                    past = True
                    break
                out.append(m)
            if past or r.next_begin_offset <= offset:
                break
            offset = r.next_begin_offset
    out.sort(key=lambda m: m.store_timestamp, reverse=True)
    return out[:MAX_LIST] if newest else sorted(out[-MAX_LIST:], key=lambda m: m.store_timestamp)[:MAX_LIST]


async def messages_page(request: Request, s: Session) -> Response:
    q = request.query_params
    topic, key = q.get("topic", "").strip(), q.get("key", "").strip()
    begin_text, end_text = q.get("begin", "").strip(), q.get("end", "").strip()
    found: list[Any] | None = None
    how = ""
    if topic and key:
        found = await (await s.admin()).query_message(topic, key, max_num=MAX_LIST)
        how = f"key {key}"
    elif topic and (begin_text or end_text):
        begin = parse_time(begin_text, "begin") if begin_text else 0
        end = parse_time(end_text, "end") if end_text else int(time.time() * 1000) + 60_000
        if end < begin:
            raise Refused(400, "end is before begin")
        found = await _browse(s, topic, begin, end, newest=False)
        how = f"stored {fmt_ms(begin)} … {fmt_ms(end)}"
    elif topic:
        found = await _browse(s, topic, None, None, newest=True)
        how = "newest"
    return _html("messages.html", s, title="Messages", topic=topic, key=key, begin=begin_text, end=end_text,
                 how=how, found=[message_view(m) for m in found] if found is not None else None, max=MAX_LIST)


async def dlq_page(request: Request, s: Session) -> Response:
    group = request.query_params.get("group", "").strip()
    found: list[Any] | None = None
    missing = ""
    if group:
        try:
            found = await _browse(s, DLQ_PREFIX + group, None, None, newest=True)
        except (ClientError, BrokerError) as e:
            found, missing = [], str(e)
    return _html("dlq.html", s, title="Dead letters", group=group, missing=missing,
                 found=[message_view(m) for m in found] if found is not None else None,
                 resent=request.query_params.get("resent", ""))


async def dlq_resend(request: Request, s: Session) -> Response:
    """Back to the group alone: into its retry topic, which only its consumers read, with the original
    topic in RETRY_TOPIC as a broker's own retry would have it."""
    group, offset_id = _field(s.form, "group"), _field(s.form, "offsetMsgId")
    admin = await s.admin()
    try:
        m = await _view(s, admin, offset_id)
    except ValueError:
        raise Refused(400, f"{offset_id!r} is not an offset message id") from None
    if m.topic != DLQ_PREFIX + group:
        raise Refused(400, f"message {offset_id} is not in the dead-letter queue of {group!r}")
    props = {k: v for k, v in dict(m.properties).items() if k not in DROP_ON_RESEND and k and v}
    props.setdefault("ORIGIN_MESSAGE_ID", m.offset_msg_id)
    props.setdefault("RETRY_TOPIC", props.get("RETRY_TOPIC") or m.topic)
    retry = RETRY_PREFIX + group
    try:
        await admin.topic_route(retry)
    except ClientError:  # no consumer of the group ever ran: make its retry topic as the broker would
        await admin.create_topic(retry, 1, wait=3.0)
    r = await (await s.producer()).send(Message(retry, m.body, properties=props))
    return _see_other("/dlq", group=group, resent=f"{offset_id} resent to {retry} as {r.msg_id}")


async def send_page(request: Request, s: Session) -> Response:
    return _html("send.html", s, title="Send a test message", topic=request.query_params.get("topic", ""),
                 result=None)


async def send_post(request: Request, s: Session) -> Response:
    f = s.form
    topic = _field(f, "topic")
    msg = Message(topic, f.get("body", ""), tags=f.get("tags", "").strip() or None,
                  keys=f.get("keys", "").strip() or None)
    r = await (await s.producer()).send(msg)
    result = {"status": r.status.value, "msgId": r.msg_id, "offsetMsgId": r.offset_msg_id,
              "broker": r.queue.broker_name, "queue": r.queue.queue_id, "offset": r.queue_offset}
    return _html("send.html", s, title="Send a test message", topic=topic, result=result)


async def static_css(request: Request) -> Response:
    return _headers(PlainTextResponse(CSS, media_type="text/css"))


async def static_js(request: Request) -> Response:
    return _headers(PlainTextResponse(JS, media_type="text/javascript"))


async def home(request: Request) -> Response:
    return RedirectResponse("/cluster", status_code=303)


def make_app(backend: Backend, allowed_hosts: frozenset[tuple[str, int | None]], max_head: int = 16384) -> Starlette:
    def page(path: str, fn: Handler, method: str = "GET") -> Route:
        return Route(path, _page(backend, fn), methods=[method])

    routes = [
        Route("/", home, methods=["GET"]),
        Route("/static/dash.css", static_css, methods=["GET"]),
        Route("/static/dash.js", static_js, methods=["GET"]),
        page("/cluster", cluster_page),
        page("/api/stats", api_stats),
        page("/topics", topics_page),
        page("/topic", topic_page),
        page("/topics/save", topic_save, "POST"),
        page("/topics/delete", topic_delete, "POST"),
        page("/groups", groups_page),
        page("/group", group_page),
        page("/groups/save", group_save, "POST"),
        page("/groups/reset", group_reset, "POST"),
        page("/message", message_page),
        page("/messages", messages_page),
        page("/dlq", dlq_page),
        page("/dlq/resend", dlq_resend, "POST"),
        page("/send", send_page),
        page("/send", send_post, "POST"),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(HostGuard, allowed=allowed_hosts, max_head=max_head)
    return app
