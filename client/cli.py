"""``rmqadmin``: mqadmin's commands and flags over rmq's Admin client (click + rich).

Every command takes ``-n`` (name servers, default ``$NAMESRV_ADDR`` or 127.0.0.1:9876) and ``--json``
(exactly one JSON document on stdout, RocketMQ's field names); tables otherwise. An error is one
line on stderr and exit status 1. ACL: ``--access-key``/``--secret-key`` (or ``$RMQ_ACCESS_KEY`` /
``$RMQ_SECRET_KEY``) sign every request.

A command is declared, not written out: :func:`command` takes its name, the options it adds
(the shared ones are declared once below: mqadmin spells a flag the same way across commands)
and an async body that gets a :class:`Tools` (name servers and credentials, clients to open) and
returns what to show (:class:`Shown`); the common options, the -b/-c check, running the body,
error handling and printing (table or JSON) are the same for every command.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs
import click
from rich.console import Console
from rich.table import Table

from rmq.client import Admin, ClientError, Message, Producer, PullConsumer, PullStatus
from rmq.kernel.model import MessageQueue
from rmq.protocol.codes import RequestCode

__all__ = ["main"]

_out = Console()


def _admin_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--json", "as_json", is_flag=True, help="one JSON document on stdout")(f)
    f = click.option("--secret-key", envvar="RMQ_SECRET_KEY", default=None, help="ACL secret key")(f)
    f = click.option("--access-key", envvar="RMQ_ACCESS_KEY", default=None, help="ACL access key")(f)
    return click.option("-n", "--namesrvAddr", "namesrv", envvar="NAMESRV_ADDR", default="127.0.0.1:9876",
                        show_default=True, help="name server(s) host:port;host:port")(f)


def _creds(ak: str | None, sk: str | None) -> tuple[str, str] | None:
    if bool(ak) != bool(sk):
        raise click.UsageError("--access-key and --secret-key go together")
    return (ak, sk) if ak and sk else None


def _run(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    try:
        return anyio.run(fn, *args)
    except (ClientError, OSError, ValueError, KeyError) as e:
        click.echo(f"rmqadmin: {' '.join(str(e).split())}", err=True)  # one line, whatever the terminal width
        sys.exit(1)


def _emit(as_json: bool, doc: Any, columns: list[str], rows: list[list[Any]], title: str = "") -> None:
    if as_json:
        sys.stdout.write(json.dumps(doc, default=str) + "\n")
        return
    if not _out.is_terminal:  # a pipe or a file: whole values, one row a line, as mqadmin's printf gives
        _plain(columns, rows)
        return
    table = Table(title=title or None, show_edge=False, header_style="bold")
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*[str(x) for x in r])
    _out.print(table)


def _plain(columns: list[str], rows: list[list[Any]]) -> None:
    """A table as text for programs: columns padded to their widest value and two spaces apart; no
    value is cut, no row wraps (a value's own line breaks become spaces)."""
    cells = [[" ".join(str(x).split()) if "\n" in str(x) else str(x) for x in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells if i < len(r)]) for i, c in enumerate(columns)]
    for line in [list(columns), *cells]:
        click.echo("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=False)).rstrip())


def version_desc(version: Any) -> str:
    """RocketMQ's name of a client/broker version number (MQVersion's ordinal: from 4.0.0 on, a
    SNAPSHOT and a release per patch version), e.g. 409 -> V4_9_8; the number itself before 4.0.0."""
    try:
        n = int(version)
    except (TypeError, ValueError):
        return str(version)
    if n < 212:
        return str(n)
    idx, snapshot = divmod(n - 212, 2)
    return f"V{4 + idx // 100}_{idx // 10 % 10}_{idx % 10}" + ("" if snapshot else "_SNAPSHOT")


def human_time(ms: Any) -> str:
    """Epoch milliseconds as mqadmin prints them (yyyy-MM-dd HH:mm:ss,SSS, local time); "" for none."""
    try:
        ms = int(ms)
    except (TypeError, ValueError):
        return ""
    if ms <= 0:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f",{ms % 1000:03d}"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """rmq's mqadmin: topics, groups, messages, cluster and brokers."""


# ---------------------------------------------------------------------------------------------- the command table


@attrs.frozen
class Shown:
    """What a command prints: ``doc`` with --json; otherwise a table of ``columns`` and ``rows``
    (when it has columns), then the text ``lines``."""

    doc: Any
    columns: list[str] = attrs.field(factory=list)
    rows: list[list[Any]] = attrs.field(factory=list)
    lines: list[str] = attrs.field(factory=list)

    def show(self, as_json: bool) -> None:
        if as_json or self.columns:
            _emit(as_json, self.doc, self.columns, self.rows)
        if not as_json:
            for line in self.lines:
                click.echo(line)


def _done(doc: Any, line: str) -> Shown:
    """An operation's acknowledgement: one line of text (mqadmin's), or ``doc`` with --json."""
    return Shown(doc, lines=[line])


def _fields(doc: dict[str, Any]) -> Shown:
    """A document shown as a field/value table, in its own order."""
    return Shown(doc, ["field", "value"], [[k, v] for k, v in doc.items()])


def _settings(doc: dict[str, Any]) -> Shown:
    """A flat map of settings shown as a key/value table, sorted by key."""
    return Shown(doc, ["key", "value"], [[k, v] for k, v in sorted(doc.items())])


@attrs.frozen
class Tools:
    """What a command's body works with: the name servers and credentials the common options gave,
    and the clients it opens over them (``async with tools.admin() as a``)."""

    namesrv: str
    credentials: tuple[str, str] | None

    def admin(self) -> Admin:
        return Admin(self.namesrv, credentials=self.credentials)

    def consumer(self, group: str = "TOOLS_CONSUMER") -> PullConsumer:
        return PullConsumer(group, self.namesrv, credentials=self.credentials)

    def producer(self, group: str = "TOOLS_PRODUCER") -> Producer:
        return Producer(group, self.namesrv, credentials=self.credentials)


Body = Callable[..., Awaitable[Shown]]
Option = Callable[[Callable[..., Any]], Callable[..., Any]]

# mqadmin's booleans are values (``-o true``), not bare flags
BOOL = click.BOOL

# Options more than one command takes, as mqadmin spells them.
TOPIC = click.option("-t", "--topic", required=True)
ANY_TOPIC = click.option("-t", "--topic", default=None)
BROKER = click.option("-b", "--brokerAddr", "broker", required=True)
TO_BROKER = click.option("-b", "--brokerAddr", "broker", default=None)
TO_CLUSTER = click.option("-c", "--clusterName", "cluster", default=None)
TARGETS = (TO_BROKER, TO_CLUSTER)  # with ``where=True``: one of them must be given
GROUP = click.option("-g", "--group", required=True)
GROUP_NAME = click.option("-g", "--groupName", "group", required=True)
CONSUMER_GROUP = click.option("-g", "--consumerGroup", "group", required=True)
KEY = click.option("-k", "--key", required=True)
VALUE = click.option("-v", "--value", required=True)
NAMESPACE = click.option("-s", "--namespace", required=True)
CONTROLLER = click.option("-a", "--controllerAddress", "controller", required=True)
CLIENT_ID = click.option("-d", "--clientId", "client_id", default=None)


def _where(cluster: str | None, broker: str | None) -> None:
    if not cluster and not broker:
        raise click.UsageError("give -c clusterName or -b brokerAddr")


def command(name: str, *options: Option, where: bool = False, doc: str | None = None) -> Callable[[Body], Body]:
    """Register ``body`` as the command ``name``: the common options (``-n``, ACL keys, ``--json``),
    then ``options`` in the order given. ``where``: the -b/-c pair (``TARGETS``) names the brokers
    and one of the two is required. The body gets a :class:`Tools` and the options as keywords;
    the :class:`Shown` it returns is printed. Its docstring (or ``doc``) is the command's help."""

    def register(body: Body) -> Body:
        def run(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, **opts: Any) -> None:
            if where:
                _where(opts["cluster"], opts["broker"])
            tools = Tools(namesrv, _creds(access_key, secret_key))
            shown: Shown = _run(lambda: body(tools, **opts))
            shown.show(as_json)

        f: Callable[..., Any] = run
        for option in reversed(options):
            f = option(f)
        main.command(name, help=doc if doc is not None else body.__doc__)(_admin_options(f))
        return body

    return register


async def _invoke_all(a: Admin, addrs: list[str], code: int, ext: dict[str, str], body: bytes = b"", *,
                      what: str) -> list[str]:
    """One request to each of ``addrs``, in turn; the addresses."""
    for addr in addrs:
        await a.instance.invoke(addr, code, ext, body, what=what)
    return addrs


# ---------------------------------------------------------------------------------------------- cluster


def _first_rate(text: Any) -> float:
    try:
        return float(str(text).split()[0])
    except (IndexError, ValueError):
        return 0.0


@command("clusterList", click.option("-m", "--moreStats", "more", is_flag=True, help="message totals of today and yesterday"),
         click.option("-i", "--interval", type=int, default=None, help="print again every INTERVAL seconds"))
async def cluster_list(t: Tools, more: bool, interval: int | None) -> Shown:
    """Clusters, brokers and their runtime figures (mqadmin's columns; -m: message totals)."""
    while True:
        shown = await _cluster_list(t, more)
        if not interval:
            return shown
        shown.show(False)
        await anyio.sleep(interval)


async def _cluster_list(t: Tools, more: bool) -> Shown:
    async with t.admin() as a:
        rows = []
        for cluster, name, bid, addr in (await a.cluster_info()).members():
            try:
                rt = await a.broker_runtime_info(addr)
            except ClientError:
                rt = {}
            rows.append({"clusterName": cluster, "brokerName": name, "brokerId": bid, "brokerAddr": addr, **rt})
    if more:
        keys = ["msgPutTotalYesterdayMorning", "msgGetTotalYesterdayMorning", "msgPutTotalTodayMorning",
                "msgGetTotalTodayMorning"]
        return Shown(rows, ["#Cluster Name", "#Broker Name", "#InTotalYest", "#OutTotalYest", "#InTotalToday",
                            "#OutTotalToday"],
                     [[r["clusterName"], r["brokerName"], *(_delta(r, k) for k in keys)] for r in rows])
    now = time.time() * 1000
    table = []
    for r in rows:
        earliest = int(r.get("earliestMessageTimeStamp") or 0)
        table.append([r["clusterName"], r["brokerName"], r["brokerId"], r["brokerAddr"],
                      version_desc(r.get("brokerVersion", "")),
                      f"{_first_rate(r.get('putTps')):.2f}({r.get('sendThreadPoolQueueSize', 0)},"
                      f"{r.get('sendThreadPoolQueueHeadWaitTimeMills', 0)}ms)",
                      f"{_first_rate(r.get('getTransferedTps')):.2f}({r.get('pullThreadPoolQueueSize', 0)},"
                      f"{r.get('pullThreadPoolQueueHeadWaitTimeMills', 0)}ms)",
                      r.get("pageCacheLockTimeMills", 0), f"{(now - earliest) / 3600000:.2f}",
                      f"{float(r.get('commitLogDiskRatio') or 0):.4f}"])
    return Shown(rows, ["#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version", "#InTPS(LOAD)",
                        "#OutTPS(LOAD)", "#PCWait(ms)", "#Hour", "#SPACE"], table)


def _delta(rt: dict[str, Any], key: str) -> int:
    """mqadmin -m's totals: yesterday's is this morning's count less yesterday morning's; today's the
    count now less this morning's."""
    now_key = key.replace("YesterdayMorning", "TodayMorning") if "Yesterday" in key else key.replace("Morning", "Now")
    try:
        return int(rt.get(now_key) or 0) - int(rt.get(key) or 0)
    except ValueError:
        return 0


async def _brokers(a: Admin, cluster: str | None, broker: str | None) -> list[str]:
    """``-b``'s broker, or every broker (masters and slaves) of ``-c``'s cluster, as mqadmin takes them."""
    if broker:
        return [broker]
    info = await a.cluster_info()
    addrs = [addr for c, _, _, addr in info.members() if c == cluster]
    if not addrs:
        raise ClientError(f"no broker in cluster {cluster!r}")
    return addrs


def _per_broker(docs: dict[str, dict[str, Any]]) -> Shown:
    """One broker's settings as a key/value table; several, with the broker's address first."""
    if len(docs) == 1:
        return _settings(next(iter(docs.values())))
    return Shown(docs, ["#Broker", "key", "value"],
                 [[addr, k, v] for addr, doc in docs.items() for k, v in sorted(doc.items())])


@command("brokerStatus", TO_BROKER, TO_CLUSTER, where=True)
async def broker_status(t: Tools, broker: str | None, cluster: str | None) -> Shown:
    """Runtime info of a broker, or of every broker of a cluster (GET_BROKER_RUNTIME_INFO)."""
    async with t.admin() as a:
        return _per_broker({addr: await a.broker_runtime_info(addr) for addr in await _brokers(a, cluster, broker)})


@command("getBrokerConfig", TO_BROKER, TO_CLUSTER, where=True)
async def get_broker_config(t: Tools, broker: str | None, cluster: str | None) -> Shown:
    """The configuration of a broker, or of every broker of a cluster (GET_BROKER_CONFIG)."""
    docs = {}
    async with t.admin() as a:
        for addr in await _brokers(a, cluster, broker):
            r = await a.instance.invoke(addr, RequestCode.GET_BROKER_CONFIG, {})
            text = (r.body or b"").decode("utf-8", "replace")
            docs[addr] = dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln)
    return _per_broker(docs)


@command("updateBrokerConfig", *TARGETS, KEY, VALUE, where=True)
async def update_broker_config(t: Tools, broker: str | None, cluster: str | None, key: str, value: str) -> Shown:
    """Change a setting of running brokers (UPDATE_BROKER_CONFIG; start-only settings are refused)."""
    async with t.admin() as a:
        addrs = await _invoke_all(a, await a.masters(cluster, broker), RequestCode.UPDATE_BROKER_CONFIG, {},
                                  f"{key}={value}".encode(), what=f"updateBrokerConfig {key}")
    return _done({"key": key, "value": value, "brokerAddrs": addrs},
                 f"update broker config success, {', '.join(addrs)}")


# ---------------------------------------------------------------------------------------------- topics


@command("topicList", click.option("-c", "--clusterModel", "by_cluster", is_flag=True,
                                   help="with each topic's cluster and consumer groups"))
async def topic_list(t: Tools, by_cluster: bool) -> Shown:
    """Every topic the name servers know (-c: a row per topic and group, with its cluster)."""
    async with t.admin() as a:
        topics = await a.list_topics()
        if not by_cluster:
            return Shown({"topicList": topics}, lines=topics)
        rows = []
        for name in topics:
            if name.startswith(("%RETRY%", "%DLQ%")):
                continue
            try:
                clusters = sorted({bd.cluster for bd in (await a.topic_route(name)).broker_datas})
                groups = sorted(await a.topic_consumed_by(name))
            except ClientError:
                continue
            for g in groups or [""]:
                rows.append({"clusterName": clusters[0] if clusters else "", "topic": name, "consumerGroup": g})
    return Shown(rows, ["#Cluster Name", "#Topic", "#Consumer Group"], [list(r.values()) for r in rows])


@command("updateTopic", TOPIC,
         click.option("-c", "--clusterName", "cluster", default=None, help="create on every master of the cluster"),
         click.option("-b", "--brokerAddr", "broker", default=None, help="create on this broker"),
         click.option("-r", "--readQueueNums", "read", type=int, default=8, show_default=True),
         click.option("-w", "--writeQueueNums", "write", type=int, default=8, show_default=True),
         click.option("-p", "--perm", type=int, default=6, show_default=True),
         click.option("-o", "--order", type=BOOL, default=False, show_default=True, help="an order topic: true|false"),
         click.option("-u", "--unit", type=BOOL, default=False, show_default=True, help="a unit topic: true|false"),
         click.option("-s", "--hasUnitSub", "unit_sub", type=BOOL, default=False, show_default=True,
                      help="has unit subscriptions: true|false"),
         click.option("-a", "--attributes", default="", help="RocketMQ 5 attributes, e.g. +message.type=FIFO"),
         where=True)
async def update_topic(t: Tools, topic: str, cluster: str | None, broker: str | None, read: int, write: int,
                       perm: int, order: bool, unit: bool, unit_sub: bool, attributes: str) -> Shown:
    """Create or update a topic (UPDATE_AND_CREATE_TOPIC)."""
    sys_flag = (1 if unit else 0) | (2 if unit_sub else 0)  # RocketMQ's TopicSysFlag: unit, unit subscription
    ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(read), "writeQueueNums": str(write),
           "perm": str(perm), "topicFilterType": "SINGLE_TAG", "topicSysFlag": str(sys_flag),
           "order": str(order).lower()}
    if attributes:
        ext["attributes"] = attributes
    async with t.admin() as a:
        addrs = await a.masters(cluster, broker)
        if not addrs:
            raise ClientError(f"no master in cluster {cluster!r}")
        await _invoke_all(a, addrs, RequestCode.UPDATE_AND_CREATE_TOPIC, ext, what=f"updateTopic {topic}")
        if order and cluster:  # as mqadmin: the order configuration (brokerName:queues;...) on the name servers
            names = sorted({n for c, n, _, _ in (await a.cluster_info()).members() if c == cluster})
            await a.put_kv_config("ORDER_TOPIC_CONFIG", topic, ";".join(f"{n}:{write}" for n in names))
    return _done({"topicName": topic, "readQueueNums": read, "writeQueueNums": write, "perm": perm,
                  "brokerAddrs": addrs}, f"create topic to {', '.join(addrs)} success.")


@command("deleteTopic", TOPIC, click.option("-c", "--clusterName", "cluster", required=True))
async def delete_topic(t: Tools, topic: str, cluster: str) -> Shown:
    """Delete a topic from the brokers and the name servers."""
    async with t.admin() as a:
        await a.delete_topic(topic, cluster)
    return _done({"topicName": topic, "deleted": True}, f"delete topic [{topic}] success.")


@command("topicRoute", TOPIC, click.option("-l", "--list", "as_list", is_flag=True, help="a table, not JSON"))
async def topic_route(t: Tools, topic: str, as_list: bool) -> Shown:
    """The topic's route: brokers and queue counts."""
    async with t.admin() as a:
        r = await a.topic_route(topic)
    doc = {"brokerDatas": [{"brokerName": b.broker_name, "cluster": b.cluster,
                            "brokerAddrs": {str(k): v for k, v in b.addrs.items()}} for b in r.broker_datas],
           "queueDatas": [{"brokerName": q.broker_name, "readQueueNums": q.read_queue_nums,
                           "writeQueueNums": q.write_queue_nums, "perm": q.perm} for q in r.queue_datas]}
    return Shown(doc, ["#Broker", "#ReadQueues", "#WriteQueues", "#Perm"],
                 [[q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"]] for q in doc["queueDatas"]])


@command("topicStatus", TOPIC)
async def topic_status(t: Tools, topic: str) -> Shown:
    """Min and max offset of every queue."""
    async with t.admin() as a:
        stats = await a.topic_stats(topic)
    rows = [{"brokerName": s.queue.broker_name, "queueId": s.queue.queue_id, "minOffset": s.min_offset,
             "maxOffset": s.max_offset, "lastUpdateTimestamp": s.last_update_timestamp} for s in stats]
    return Shown(rows, ["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"],
                 [list(r.values()) for r in rows])


# ---------------------------------------------------------------------------------------------- groups


@command("updateSubGroup", GROUP_NAME, TO_CLUSTER, TO_BROKER,
         click.option("-s", "--consumeEnable", "enable", type=BOOL, default=True, show_default=True),
         click.option("-m", "--consumeFromMinEnable", "from_min", type=BOOL, default=False, show_default=True),
         click.option("-d", "--consumeBroadcastEnable", "broadcast", type=BOOL, default=False, show_default=True),
         click.option("-q", "--retryQueueNums", "retry_queues", type=int, default=1, show_default=True),
         click.option("-r", "--retryMaxTimes", "retry_max", type=int, default=16, show_default=True),
         click.option("-i", "--brokerId", "broker_id", type=int, default=0, show_default=True,
                      help="the broker to consume from"),
         click.option("-w", "--whichBrokerWhenConsumeSlowly", "slow_broker", type=int, default=1, show_default=True),
         click.option("-a", "--notifyConsumerIdsChanged", "notify", type=BOOL, default=True, show_default=True),
         click.option("-o", "--consumeMessageOrderly", "orderly", type=BOOL, default=False, show_default=True),
         where=True)
async def update_sub_group(t: Tools, group: str, cluster: str | None, broker: str | None, enable: bool,
                           from_min: bool, broadcast: bool, retry_queues: int, retry_max: int, broker_id: int,
                           slow_broker: int, notify: bool, orderly: bool) -> Shown:
    """Create or update a subscription group (mqadmin's defaults: broadcast and from-min off)."""
    doc = {"groupName": group, "consumeEnable": enable, "consumeFromMinEnable": from_min,
           "consumeBroadcastEnable": broadcast, "retryQueueNums": retry_queues, "retryMaxTimes": retry_max,
           "brokerId": broker_id, "whichBrokerWhenConsumeSlowly": slow_broker,
           "notifyConsumerIdsChangedEnable": notify, "consumeMessageOrderly": orderly}
    async with t.admin() as a:
        addrs = await _invoke_all(a, await a.masters(cluster, broker), RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                  {}, json.dumps(doc).encode(), what=f"updateSubGroup {group}")
    return _done({**doc, "brokerAddrs": addrs}, f"create subscription group to {', '.join(addrs)} success.")


@command("consumerProgress", click.option("-g", "--groupName", "group", default=None, help="default: every group"),
         click.option("-t", "--topicName", "topic", default=None),
         click.option("-s", "--showClientIP", "client_ip", type=BOOL, default=False, show_default=True,
                      help="the member consuming each queue"))
async def consumer_progress(t: Tools, group: str | None, topic: str | None, client_ip: bool) -> Shown:
    """Broker offset, consumer offset and lag per queue of a group; without -g, a line per group
    (members, their version, type, model, rate and total lag), as mqadmin prints."""
    if group is None:
        return await _all_groups_progress(t)
    async with t.admin() as a:
        progress = await a.consumer_progress(group, topic)
        owners: dict[tuple[str, str, int], str] = {}
        if client_ip:
            owners = await _queue_owners(a, group)
    rows = [{"topic": p.queue.topic, "brokerName": p.queue.broker_name, "queueId": p.queue.queue_id,
             "brokerOffset": p.max_offset, "consumerOffset": p.committed, "diff": p.lag,
             "lastTimestamp": p.last_timestamp} for p in progress]
    doc = {"consumerGroup": group, "offsetTable": rows, "diffTotal": sum(r["diff"] for r in rows)}
    cols = ["#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset"]
    table = []
    for r in rows:
        row = [r["topic"], r["brokerName"], r["queueId"], r["brokerOffset"], r["consumerOffset"]]
        if client_ip:
            r["clientIP"] = owners.get((r["topic"], r["brokerName"], r["queueId"]), "N/A")
            row.append(r["clientIP"])
        table.append([*row, r["diff"], human_time(r["lastTimestamp"])[:19] or "N/A"])
    return Shown(doc, [*cols, *(["#Client IP"] if client_ip else []), "#Diff", "#LastTime"], table,
                 [f"Diff Total: {doc['diffTotal']}"])


async def _queue_owners(a: Admin, group: str) -> dict[tuple[str, str, int], str]:
    """Which member holds each queue (from the members' running info), by (topic, broker, queue id)."""
    owners = {}
    try:
        conns = (await a.consumer_connection(group)).get("connectionSet") or []
    except ClientError:
        return {}
    for c in conns:
        try:
            info = await a.consumer_running_info(group, c["clientId"], False)
        except ClientError:
            continue
        for key in (info.get("mqTable") or {}):
            mq = json.loads(key) if isinstance(key, str) and key.startswith("{") else key
            if isinstance(mq, dict):
                owners[(mq.get("topic"), mq.get("brokerName"), mq.get("queueId"))] = c.get("clientAddr", "")
    return owners


async def _all_groups_progress(t: Tools) -> Shown:
    rows = []
    async with t.admin() as a:
        groups = sorted(n[len("%RETRY%"):] for n in await a.list_topics() if n.startswith("%RETRY%"))
        for g in groups:
            try:
                progress = await a.consumer_progress(g)
            except ClientError:
                continue
            try:
                conn = await a.consumer_connection(g)
            except ClientError:
                conn = {}
            members = conn.get("connectionSet") or []
            versions = [int(m.get("version", 0)) for m in members]
            rows.append({"group": g, "count": len(members),
                         "version": version_desc(min(versions)) if versions else "OFFLINE",
                         "consumeType": {"CONSUME_ACTIVELY": "PULL", "CONSUME_PASSIVELY": "PUSH",
                                         "CONSUME_POP": "POP"}.get(str(conn.get("consumeType")), "") if members else "",
                         "messageModel": str(conn.get("messageModel") or "") if members else "",
                         "consumeTps": 0, "diffTotal": sum(p.lag for p in progress)})
    return Shown(rows, ["#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff Total"],
                 [list(r.values()) for r in rows])


def _offsets(result: dict[Any, int]) -> Shown:
    """Offsets per queue after a reset, as mqadmin prints them."""
    rows = [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off} for mq, off in sorted(result.items())]
    return Shown(rows, ["#brokerName", "#queueId", "#offset"], [list(r.values()) for r in rows])


@command("resetOffsetByTime", GROUP, TOPIC,
         click.option("-s", "--timestamp", required=True, help="epoch ms, 'now', or yyyy-MM-dd#HH:mm:ss:SSS"),
         click.option("-f", "--force", type=BOOL, default=True, show_default=True,
                      help="false: never move a group forward past what it consumed"))
async def reset_offset_by_time(t: Tools, group: str, topic: str, timestamp: str, force: bool) -> Shown:
    """Move a group to the offsets of a time (online consumers are told, as mqadmin does)."""
    ts = _timestamp(timestamp)
    async with t.admin() as a:
        return _offsets(await a.reset_offset_by_timestamp(group, topic, ts, force=force))


def _timestamp(text: str) -> int:
    if text == "now":
        return int(time.time() * 1000)
    if text.isdigit():
        return int(text)
    try:
        return int(time.mktime(time.strptime(text[:19], "%Y-%m-%d#%H:%M:%S")) * 1000) + int(text[20:23] or 0)
    except ValueError:
        raise click.BadParameter(f"{text!r}: epoch ms, now, or yyyy-MM-dd#HH:mm:ss:SSS") from None


# ---------------------------------------------------------------------------------------------- messages


def _message_doc(m: Any, charset: str = "utf-8", body: bool = True) -> dict[str, Any]:
    """A message's fields; the body decoded with ``charset`` (mqadmin's -c / -f), or not shown."""
    try:
        text = m.body.decode(charset, "replace") if body else "NOT PRINT BODY"
    except LookupError:
        raise click.BadParameter(f"unknown charset {charset!r}") from None
    return {"topic": m.topic, "msgId": m.msg_id, "offsetMsgId": m.offset_msg_id,
            "tags": m.tags, "keys": m.keys, "queueId": m.queue_id, "queueOffset": m.queue_offset,
            "bornTimestamp": m.born_timestamp, "storeTimestamp": m.store_timestamp, "bornHost": m.born_host,
            "storeHost": m.store_host, "reconsumeTimes": m.reconsume_times, "properties": dict(m.properties),
            "body": text}


@command("queryMsgById", click.option("-i", "--msgId", "msg_id", required=True,
                                      help="offset msgId, or the unique key with -t"),
         ANY_TOPIC, click.option("-g", "--consumerGroup", "group", default=None, help="with -d: consume it directly"),
         click.option("-d", "--clientId", "client_id", default=None, help="the member of -g that consumes it"),
         click.option("-s", "--sendMessage", "resend", type=BOOL, default=False, show_default=True,
                      help="send the message again, to its topic"),
         click.option("-f", "--bodyFormat", "charset", default="utf-8", show_default=True,
                      help="the charset to print the body in (RocketMQ 5's -f)"))
async def query_msg_by_id(t: Tools, msg_id: str, topic: str | None, group: str | None, client_id: str | None,
                          resend: bool, charset: str) -> Shown:
    """One message by its offset msgId (or unique key with -t); with -g and -d, consumed directly
    by that member's listener (CONSUME_MESSAGE_DIRECTLY); with -s true, sent again; as mqadmin does."""
    if resend and not (group and client_id):
        async with t.admin() as a:
            m = await (a.query_message_by_id(topic, msg_id) if topic else a.view_message(msg_id))
        async with t.producer("ReSendMsgById") as p:
            r = await p.send(Message(m.topic, m.body, tags=m.tags, keys=m.keys, properties=dict(m.properties)))
        return _fields({"originalMsgId": msg_id, "msgId": r.msg_id, "offsetMsgId": r.offset_msg_id,
                        "sendStatus": r.status.value, "brokerName": r.queue.broker_name, "queueId": r.queue.queue_id,
                        "queueOffset": r.queue_offset})
    return await show_message(t, msg_id, topic, group, client_id, charset)


async def show_message(t: Tools, msg_id: str, topic: str | None, group: str | None, client_id: str | None,
                       charset: str = "utf-8") -> Shown:
    """One message (by unique key when ``topic`` is given, else by offset msgId); with a group and a
    client id, also have that member consume it (CONSUME_MESSAGE_DIRECTLY), with its result."""
    if bool(group) != bool(client_id):
        raise click.UsageError("-g and -d go together")
    async with t.admin() as a:
        m = await (a.query_message_by_id(topic, msg_id) if topic else a.view_message(msg_id))
        doc = _message_doc(m, charset)
        result = None
        if group and client_id:
            result = await a.consume_message_directly(group, client_id, m.offset_msg_id, m.topic)
    if result is not None:
        doc["consumeMessageDirectlyResult"] = result
    return _fields(doc)


@command("queryMsgByKey", TOPIC, click.option("-k", "--msgKey", "key", required=True))
async def query_msg_by_key(t: Tools, topic: str, key: str) -> Shown:
    """Messages with a key (the broker's index)."""
    async with t.admin() as a:
        docs = [_message_doc(m) for m in await a.query_message(topic, key)]
    return Shown(docs, ["#Message ID", "#QID", "#Offset"], [[d["msgId"], d["queueId"], d["queueOffset"]] for d in docs])


@command("sendMessage", TOPIC, click.option("-p", "--body", required=True), click.option("-k", "--key", default=None),
         click.option("-c", "--tags", default=None), click.option("-b", "--broker", default=None, help="to this broker (name)"),
         click.option("-i", "--qid", type=int, default=None, help="to this queue of -b's broker"),
         click.option("-m", "--msgTraceEnable", "trace", type=BOOL, default=False, show_default=True))
async def send_message(t: Tools, topic: str, body: str, key: str | None, tags: str | None, broker: str | None,
                       qid: int | None, trace: bool) -> Shown:
    """Send one message (to -b's queue -i when given, as mqadmin)."""
    if (broker is None) != (qid is None):
        raise click.UsageError("-b and -i go together")
    producer = Producer("TOOLS_PRODUCER", t.namesrv, credentials=t.credentials, enable_trace=True) if trace else t.producer()
    async with producer as p:
        queue = MessageQueue(topic, broker, qid) if broker is not None and qid is not None else None
        r = await p.send(Message(topic, body, tags=tags, keys=key), queue=queue)
    doc = {"brokerName": r.queue.broker_name, "queueId": r.queue.queue_id, "sendStatus": r.status.value,
           "msgId": r.msg_id, "offsetMsgId": r.offset_msg_id, "queueOffset": r.queue_offset}
    return Shown(doc, ["#Broker Name", "#QID", "#Send Result", "#MsgId"],
                 [[doc["brokerName"], doc["queueId"], doc["sendStatus"], doc["msgId"]]])


def _messages(messages: list[Any], columns: list[str], keys: list[str], charset: str = "utf-8",
              body: bool = True) -> Shown:
    """Browsed messages: a row of ``keys`` of each (bodies whole: a pipe gets every byte, a terminal wraps)."""
    docs = [_message_doc(m, charset, body) for m in messages]
    return Shown(docs, columns, [[d[k] for k in keys] for d in docs])


@command("consumeMessage", TOPIC,
         click.option("-b", "--brokerName", "broker_name", default=None, help="only this broker's queues"),
         click.option("-i", "--queueId", "queue_id", type=int, default=None, help="only this queue (with -b)"),
         click.option("-o", "--offset", type=int, default=None, help="from this offset (with -b and -i)"),
         click.option("-g", "--consumerGroup", "group", default="TOOLS_CONSUMER", show_default=True),
         click.option("-s", "--beginTimestamp", "begin", default=None, help="from this time (epoch ms or yyyy-MM-dd#HH:mm:ss:SSS)"),
         click.option("-e", "--endTimestamp", "end", default=None, help="up to this time"),
         click.option("-c", "--MessageNumber", "count", type=int, default=128, show_default=True))
async def consume_message(t: Tools, topic: str, broker_name: str | None, queue_id: int | None, offset: int | None,
                          group: str, begin: str | None, end: str | None, count: int) -> Shown:
    """Print up to -c messages of the topic (of -b's queue -i from -o), from the start of each queue
    or from -s, up to -e (commits nothing)."""
    out: list[Any] = []
    begin_ms = _timestamp(begin) if begin else None
    end_ms = _timestamp(end) if end else None
    async with t.consumer(group) as pc:
        for mq in await pc.fetch_queues(topic):
            if (broker_name and mq.broker_name != broker_name) or (queue_id is not None and mq.queue_id != queue_id):
                continue
            if offset is not None and queue_id is not None:
                start = offset
            elif begin_ms is not None:
                start = await pc.search_offset(mq, begin_ms)
            else:
                start = await pc.min_offset(mq)
            offset_now = start
            while len(out) < count:
                r = await pc.pull(mq, offset_now, min(32, count - len(out)))
                if r.status is not PullStatus.FOUND:
                    break
                out += [m for m in r.messages if end_ms is None or m.store_timestamp <= end_ms]
                offset_now = r.next_begin_offset
    return _messages(out, ["#QID", "#Offset", "#Tags", "#Body"], ["queueId", "queueOffset", "tags", "body"])


from rmq.client import cli_ops, cli_tools  # noqa: E402,F401  (register the rest of mqadmin's commands on main)

if __name__ == "__main__":  # pragma: no cover
    main()
