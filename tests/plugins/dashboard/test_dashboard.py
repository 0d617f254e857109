"""The browser dashboard against a real rmqd: pages driven by Debian's chromium (playwright), forms that
change the broker (checked with rmq.client), HTTP Basic under ACL, escaping of hostile text, POST-only
state changes, and a bad ``[dashboard]`` table refused at start."""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.client import Admin, Message, Producer
from rmq.plugins.dashboard import structure_dashboard
from rmq.protocol.codes import RequestCode
from rmq.testing.daemon import RmqdProcess, free_port

CHROMIUM = "/usr/bin/chromium"
TOPIC, GROUP = "DashTopic", "DashGroup"
HOSTILE = "<script>alert('x')</script>"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def dash(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RmqdProcess, str]]:
    """One rmqd with its dashboard on a free port, shared by the tests that only read or add."""
    port = free_port()
    proc = RmqdProcess(tmp_path_factory.mktemp("dash"), extra={"dashboard": {"listenPort": port}})
    proc.start()
    try:
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


def http(url: str, data: dict[str, str] | None = None, headers: dict[str, str] | None = None,
         csrf: bool = True) -> tuple[int, str]:
    """GET, or POST ``data`` as a form; a POST carries the form token of a page loaded first (as a browser
    would) unless ``csrf`` is False."""
    headers = dict(headers or {})
    body = None
    if data is not None:
        if csrf:
            token = form_token(url, headers)
            data = {**data, "csrf": token}
            headers["Cookie"] = f"rmq_csrf={token}"
        body = urllib.parse.urlencode(data).encode()
    req = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=15) as r:  # noqa: S310 - loopback test server
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def form_token(url: str, headers: dict[str, str]) -> str:
    """The CSRF token a page of the dashboard at ``url`` hands out: in its cookie and in its forms."""
    parts = urllib.parse.urlsplit(url)
    req = urllib.request.Request(f"{parts.scheme}://{parts.netloc}/send", headers=headers)
    with urllib.request.urlopen(req, timeout=15) as r:  # noqa: S310 - loopback test server
        cookie = r.headers["Set-Cookie"].split(";")[0].partition("=")[2]
        field = r.read().decode().split('name="csrf" value="')[1].split('"')[0]
    assert cookie == field
    return cookie


async def _create_group(ns: str, group: str, creds: tuple[str, str] | None = None) -> None:
    async with Admin(ns, credentials=creds) as a:
        for addr in (await a.cluster_info()).master_addrs():
            doc = {"groupName": group, "consumeEnable": True, "retryMaxTimes": 16}
            await a.instance.invoke(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, json.dumps(doc).encode())


@pytest.mark.integration
@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_pages_and_forms_in_a_browser(dash: tuple[RmqdProcess, str]) -> None:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} missing: make install-test installs Debian's chromium")
    from playwright.async_api import async_playwright

    proc, base = dash
    ns = proc.namesrv_addr
    async with Admin(ns) as a:
        await a.create_topic(TOPIC, 2)
    await _create_group(ns, GROUP)
    async with Producer("DASH_P", ns) as p:
        sent = [await p.send(Message(TOPIC, f"body {i}", keys=f"key{i}")) for i in range(5)]

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            page.set_default_timeout(15_000)
            # cluster: the broker with its runtime figures, and the live chart polling /api/stats
            await page.goto(f"{base}/")
            assert await page.title() == "Cluster · rmq dashboard"
            assert "broker-a" in await page.inner_text("#brokers")
            with anyio.fail_after(15):  # (no wait_for_function: the page's CSP forbids eval)
                while int(await page.get_attribute("#tps", "data-polls") or 0) < 2:  # noqa: ASYNC110
                    await anyio.sleep(0.1)
            assert float(await page.inner_text("#put-tps")) >= 0
            # topics table, then the topic's queues
            await page.click("nav >> text=Topics")
            await page.click(f"#topics >> text={TOPIC}")
            rows = [r.split("\t") for r in await page.locator("#queues tbody tr").all_inner_texts()]
            assert len(rows) == 2 and sum(int(r[3]) for r in rows) == 5  # max offsets: every message
            # groups table and the group's page
            await page.goto(f"{base}/groups")
            await page.click(f"#groups >> text={GROUP}")
            assert await page.inner_text("h1") == f"Group {GROUP}"
            # lookup by message id shows the body
            await page.goto(f"{base}/message")
            await page.fill("#lookup-id input[name=topic]", TOPIC)
            await page.fill("#lookup-id input[name=id]", sent[3].msg_id)
            await page.click("#lookup-id button")
            assert await page.inner_text("pre.body") == "body 3"
            assert sent[3].msg_id in await page.inner_text("td.msgid")
            # by key, and the newest messages of the topic
            await page.goto(f"{base}/messages")
            await page.fill("#by-key input[name=topic]", TOPIC)
            await page.fill("#by-key input[name=key]", "key1")
            await page.click("#by-key button")
            assert "body 1" in await page.inner_text("#message-list")
            await page.goto(f"{base}/messages?topic={TOPIC}")
            assert (await page.inner_text("#message-list")).count("body ") == 5
            await page.fill("#by-time input[name=begin]", "2000-01-01T00:00:00")
            await page.click("#by-time button")
            assert (await page.inner_text("#message-list")).count("body ") == 5
            await page.fill("#by-time input[name=begin]", "2099-01-01T00:00:00")
            await page.fill("#by-time input[name=end]", "2099-01-02T00:00:00")
            await page.click("#by-time button")
            assert "no messages" in await page.inner_text("#message-list")
            await page.fill("#by-time input[name=end]", "2098-01-01T00:00:00")
            await page.click("#by-time button")
            assert "end is before begin" in await page.inner_text("#error")
            # the send form sends; the message is stored (read back with rmq.client)
            await page.goto(f"{base}/send?topic={TOPIC}")
            await page.fill("#send-form input[name=keys]", "from-browser")
            await page.fill("#send-form textarea[name=body]", "sent from the browser")
            await page.click("#send-form button")
            msg_id = await page.inner_text("#sent-id")
            async with Admin(ns) as a:
                stored = await a.query_message_by_id(TOPIC, msg_id)
            assert stored.body == b"sent from the browser" and stored.keys == "from-browser"
            # the create-topic form creates it on the broker
            await page.goto(f"{base}/topics")
            await page.fill("#create-topic input[name=topic]", "BrowserTopic")
            await page.fill("#create-topic input[name=queues]", "3")
            await page.click("#create-topic button")
            assert await page.inner_text("h1") == "Topic BrowserTopic"
            async with Admin(ns) as a:
                route = await a.topic_route("BrowserTopic")
            assert [q.write_queue_nums for q in route.queue_datas] == [3]
            page.once("dialog", lambda d: d.accept())  # "Delete topic BrowserTopic?"
            await page.click("#delete-topic button")
            assert await page.inner_text("h1") == "Topics"
            async with Admin(ns) as a:
                assert "BrowserTopic" not in await a.list_topics()
            # the create-group form
            await page.goto(f"{base}/groups")
            await page.fill("#create-group input[name=group]", "BrowserGroup")
            await page.click("#create-group button")
            assert await page.inner_text("h1") == "Group BrowserGroup"
            await page.goto(f"{base}/groups")
            assert "BrowserGroup" in await page.inner_text("#groups")
            # reset the group's offsets to the beginning: its lag is every message
            await page.goto(f"{base}/group?name={GROUP}")
            await page.fill("#reset-offset input[name=topic]", TOPIC)  # no offsets yet: a text field
            await page.fill("#reset-offset input[name=when]", "2000-01-01T00:00:00")
            page.once("dialog", lambda d: d.accept())
            await page.click("#reset-offset button")
            assert "reset to 2000-01-01" in await page.inner_text("#reset-result")
            assert int(await page.inner_text("#lag")) == 6
        finally:
            await browser.close()


@pytest.mark.integration
def test_hostile_text_is_escaped_and_changes_are_post_only(dash: tuple[RmqdProcess, str]) -> None:
    proc, base = dash

    async def send() -> Any:
        async with Admin(proc.namesrv_addr) as a:
            await a.create_topic("EscTopic", 1)
        async with Producer("ESC_P", proc.namesrv_addr) as p:
            return await p.send(Message("EscTopic", HOSTILE, tags="t<b>", keys="k\"><img src=x>",
                                        properties={"evil<i>": "\"'><script>1</script>"}))

    r = anyio.run(send)
    status, text = http(f"{base}/message?topic=EscTopic&id={r.msg_id}")
    assert status == 200
    assert "<script>" not in text.replace('<script src="/static/dash.js" defer></script>', "")
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in text
    assert "<img src=x>" not in text and "<i>" not in text and "t<b>" not in text
    status, text = http(f"{base}/messages?topic=EscTopic")
    assert status == 200 and "&lt;script&gt;" in text and "<script>alert" not in text
    # a name the broker would never accept, echoed back in the error page
    status, text = http(f"{base}/topic?name={urllib.parse.quote(HOSTILE)}")
    assert status == 404 and "<script>alert" not in text and "&lt;script&gt;" in text
    # state changes: POST only, and never from another site's page
    assert http(f"{base}/topics/delete?topic=EscTopic")[0] == 405
    assert http(f"{base}/topics/save", {"topic": "X1"}, {"Origin": "http://evil.example"})[0] == 403
    status, text = http(f"{base}/topics/save", {"topic": "bad name!"})
    assert status == 502 and "illegal characters" in text  # the broker's own validation
    status, _ = http(f"{base}/topics/delete", {"topic": "EscTopic"})
    assert status == 200  # 303 to /topics, followed
    assert http(f"{base}/static/dash.js")[0] == 200
    status, text = http(f"{base}/api/stats")
    assert status == 200 and set(json.loads(text)) == {"putTps", "getTps", "points"}


ACCOUNTS = """
accounts:
  - accessKey: dashuser
    secretKey: "12345678"
    admin: false
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
  - accessKey: dashadmin
    secretKey: "87654321"
    admin: true
"""


def _basic(ak: str, sk: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{ak}:{sk}".encode()).decode()}


def test_acl_broker_wants_basic_credentials(rmqd_factory: Any, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACCOUNTS)
    port = free_port()
    proc: RmqdProcess = rmqd_factory(broker_conf={"aclEnable": True, "plainAclFile": str(acl)},
                                     extra={"dashboard": {"listenPort": port}})
    base = f"http://127.0.0.1:{port}"
    req = urllib.request.Request(f"{base}/topics")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)  # noqa: S310
    assert e.value.code == 401 and e.value.headers["WWW-Authenticate"].startswith("Basic")
    assert http(f"{base}/api/stats")[0] == 401
    assert http(f"{base}/topics", headers=_basic("dashadmin", "wrong"))[0] == 401
    status, text = http(f"{base}/topics?system=1", headers=_basic("dashadmin", "87654321"))
    assert status == 200 and "TBW102" in text and "dashadmin" in text
    # the account's own permissions apply to what the dashboard does for it
    status, text = http(f"{base}/topics/save", {"topic": "AclT"}, _basic("dashuser", "12345678"))
    assert status == 502 and "NO_PERMISSION" in text, text
    status, _ = http(f"{base}/topics/save", {"topic": "AclT"}, _basic("dashadmin", "87654321"))
    assert status == 200
    assert any("dashboard on http://127.0.0.1" in ln for ln in proc.log_lines())
    # a browser logs in with the account and sees it named
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(http_credentials={"username": "dashadmin", "password": "87654321"})
            page.goto(f"{base}/topics")
            assert page.inner_text("nav .user") == "dashadmin" and page.query_selector("#topics")
            assert browser.new_page().request.get(f"{base}/topics").status == 401  # no credentials
        finally:
            browser.close()


def test_changes_only_from_loopback_without_acl() -> None:
    """Without ACL the dashboard, a loopback peer of the broker, lends no admin rights to remote browsers."""
    from types import SimpleNamespace

    from rmq.plugins.dashboard.backend import Backend, Refused

    def backend(**cfg: Any) -> Backend:
        conf = {"aclEnable": False, "allowRemoteAdmin": False, **cfg}
        return Backend(SimpleNamespace(config=SimpleNamespace(**conf)), [], acl_on=conf["aclEnable"], accounts=None)

    for host in ("127.0.0.1", "::1", "::ffff:127.0.0.1"):
        backend().check_admin_peer(host)
    for host in ("10.1.2.3", "::ffff:10.1.2.3", "", "unix"):
        with pytest.raises(Refused, match="loopback only"):
            backend().check_admin_peer(host)
    backend(allowRemoteAdmin=True).check_admin_peer("10.1.2.3")
    backend(aclEnable=True).check_admin_peer("10.1.2.3")


@pytest.mark.integration
def test_bad_dashboard_table_refuses_start(tmp_path: Path) -> None:
    proc = RmqdProcess(tmp_path / "d", extra={"dashboard": {"listenPort": free_port(), "listenPrt": 1}})
    with pytest.raises(RuntimeError, match="did not start"):
        proc.start(timeout=20)
    assert any("dashboard: unknown key 'listenPrt'; known: listenPort, listenHost, allowedHosts" in ln
               for ln in proc.log_lines())
    with pytest.raises(ValueError, match="listenPort: expected a port number"):
        structure_dashboard({"listenPort": "8080"})
    assert structure_dashboard({}).listenPort == 8080 and structure_dashboard({}).listenHost == "127.0.0.1"


def test_no_dashboard_without_a_table(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    assert not any("dashboard on" in ln for ln in proc.log_lines())


@pytest.mark.integration
@pytest.mark.anyio
async def test_dead_letters_resend_and_clients_online(dash: tuple[RmqdProcess, str], tmp_path: Path) -> None:
    from rmq.client import PullConsumer, PullStatus, PushConsumer

    proc, base = dash
    ns, group = proc.namesrv_addr, "DlqGroup"
    async with Admin(ns) as a:
        await a.create_topic("DlqOrigin", 1)
        await a.create_topic(f"%DLQ%{group}", 1)  # what the broker makes on a group's first dead letter
    async with Producer("DLQ_P", ns) as p:
        await p.send(Message(f"%DLQ%{group}", b"dead letter", keys="dk",
                             properties={"RETRY_TOPIC": "DlqOrigin", "RECONSUME_TIME": "16"}))
    status, text = await anyio.to_thread.run_sync(http, f"{base}/dlq?group={group}")
    assert status == 200 and "dead letter" in text
    offset_id = text.split('name="offsetMsgId" value="')[1].split('"')[0]
    status, text = await anyio.to_thread.run_sync(http, f"{base}/dlq/resend", {"group": group, "offsetMsgId": offset_id})
    assert status == 200 and f"{offset_id} resent to %RETRY%{group}" in text
    async with PullConsumer(group, ns) as pc:
        (mq,) = await pc.fetch_queues(f"%RETRY%{group}")
        r = await pc.pull(mq, 0, 8)
    assert r.status is PullStatus.FOUND and [m.body for m in r.messages] == [b"dead letter"]
    back = r.messages[0]
    assert back.properties["RETRY_TOPIC"] == "DlqOrigin" and back.keys == "dk"
    assert back.properties["ORIGIN_MESSAGE_ID"] == offset_id and "RECONSUME_TIME" not in back.properties
    # a message of another group's DLQ is refused
    status, _ = await anyio.to_thread.run_sync(http, f"{base}/dlq/resend", {"group": "Other", "offsetMsgId": offset_id})
    assert status == 400

    async def ignore(msg: Any) -> None:
        return None

    async with PushConsumer("OnlineGroup", ns, listener=ignore, offset_store_dir=str(tmp_path)) as c:
        c.subscribe("DlqOrigin")
        with anyio.fail_after(15):
            while True:
                status, text = await anyio.to_thread.run_sync(http, f"{base}/group?name=OnlineGroup")
                if status == 200 and c.client_id in text:
                    break
                await anyio.sleep(0.2)
        assert "DlqOrigin" in text.split('id="clients"')[1]


def test_the_table_selects_the_dashboard(tmp_path: Path) -> None:
    """Served with a [dashboard] table (the embedded default has one), off without; --set reaches it."""
    from rmq.kernel import load_config
    from rmq.plugins.dashboard import DashboardConfig

    assert load_config(None).dashboard == DashboardConfig()  # structured by the kernel with the plugin's class
    assert load_config(None, ["dashboard.listenPort=0"]).dashboard == DashboardConfig(listenPort=0)
    assert "dashboard" in load_config(None).selected()["processors"]
    f = tmp_path / "rmqd.toml"
    f.write_text("[broker]\n")
    assert load_config(f).dashboard is None
    f.write_text("[broker]\n[dashboard]\nlistenHost = \"::1\"\n")
    assert load_config(f).dashboard == DashboardConfig(listenHost="::1")
