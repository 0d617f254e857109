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
    table = Table(title=title or None, show_edge=False, header_style="bold")
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*[str(x) for x in r])
    _out.print(table)


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


@command("clusterList")
async def cluster_list(t: Tools) -> Shown:
    """Clusters, brokers and their runtime figures."""
    async with t.admin() as a:
        rows = []
        for cluster, name, bid, addr in (await a.cluster_info()).members():
            try:
                rt = await a.broker_runtime_info(addr)
            except ClientError:
                rt = {}
            rows.append({"clusterName": cluster, "brokerName": name, "brokerId": bid, "brokerAddr": addr,
                         "putTps": rt.get("putTps", ""), "getTransferedTps": rt.get("getTransferedTps", ""),
                         "brokerVersionDesc": rt.get("brokerVersionDesc", ""),
                         "msgPutTotalTodayNow": rt.get("msgPutTotalTodayNow", "")})
    cols = ["clusterName", "brokerName", "brokerId", "brokerAddr", "putTps", "getTransferedTps"]
    return Shown(rows, ["#Cluster Name", "#Broker Name", "#BID", "#Addr", "#InTPS", "#OutTPS"],
                 [[r[c] for c in cols] for r in rows])


@command("brokerStatus", click.option("-b", "--brokerAddr", "broker", required=True, help="broker host:port"))
async def broker_status(t: Tools, broker: str) -> Shown:
    """A broker's runtime info (GET_BROKER_RUNTIME_INFO)."""
    async with t.admin() as a:
        return _settings(await a.broker_runtime_info(broker))


@command("getBrokerConfig", BROKER)
async def get_broker_config(t: Tools, broker: str) -> Shown:
    """A broker's configuration (GET_BROKER_CONFIG)."""
    async with t.admin() as a:
        r = await a.instance.invoke(broker, RequestCode.GET_BROKER_CONFIG, {})
    text = (r.body or b"").decode("utf-8", "replace")
    return _settings(dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln))


@command("updateBrokerConfig", *TARGETS, KEY, VALUE, where=True)
async def update_broker_config(t: Tools, broker: str | None, cluster: str | None, key: str, value: str) -> Shown:
    """Change a setting of running brokers (UPDATE_BROKER_CONFIG; start-only settings are refused)."""
    async with t.admin() as a:
        addrs = await _invoke_all(a, await a.masters(cluster, broker), RequestCode.UPDATE_BROKER_CONFIG, {},
                                  f"{key}={value}".encode(), what=f"updateBrokerConfig {key}")
    return _done({"key": key, "value": value, "brokerAddrs": addrs},
                 f"update broker config success, {', '.join(addrs)}")


# ---------------------------------------------------------------------------------------------- topics


@command("topicList")
async def topic_list(t: Tools) -> Shown:
    """Every topic the name servers know."""
    async with t.admin() as a:
        topics = await a.list_topics()
    return Shown({"topicList": topics}, lines=topics)


@command("updateTopic", TOPIC,
         click.option("-c", "--clusterName", "cluster", default=None, help="create on every master of the cluster"),
         click.option("-b", "--brokerAddr", "broker", default=None, help="create on this broker"),
         click.option("-r", "--readQueueNums", "read", type=int, default=8, show_default=True),
         click.option("-w", "--writeQueueNums", "write", type=int, default=8, show_default=True),
         click.option("-p", "--perm", type=int, default=6, show_default=True),
         click.option("-o", "--order", is_flag=True, help="an order topic"),
         click.option("-a", "--attributes", default="", help="RocketMQ 5 attributes, e.g. +message.type=FIFO"),
         where=True)
async def update_topic(t: Tools, topic: str, cluster: str | None, broker: str | None, read: int, write: int,
                       perm: int, order: bool, attributes: str) -> Shown:
    """Create or update a topic (UPDATE_AND_CREATE_TOPIC)."""
    ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(read), "writeQueueNums": str(write),
           "perm": str(perm), "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": str(order).lower()}
    if attributes:
        ext["attributes"] = attributes
    async with t.admin() as a:
        addrs = await a.masters(cluster, broker)
        if not addrs:
            raise ClientError(f"no master in cluster {cluster!r}")
        await _invoke_all(a, addrs, RequestCode.UPDATE_AND_CREATE_TOPIC, ext, what=f"updateTopic {topic}")
    return _done({"topicName": topic, "readQueueNums": read, "writeQueueNums": write, "perm": perm,
                  "brokerAddrs": addrs}, f"create topic to {', '.join(addrs)} success.")


@command("deleteTopic", TOPIC, TO_CLUSTER)
async def delete_topic(t: Tools, topic: str, cluster: str | None) -> Shown:
    """Delete a topic from the brokers and the name servers."""
    async with t.admin() as a:
        await a.delete_topic(topic, cluster)
    return _done({"topicName": topic, "deleted": True}, f"delete topic [{topic}] success.")


@command("topicRoute", TOPIC)
async def topic_route(t: Tools, topic: str) -> Shown:
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
         click.option("-r", "--retryMaxTimes", "retry_max", type=int, default=16, show_default=True),
         click.option("-s", "--consumeEnable", "enable", type=bool, default=True, show_default=True),
         click.option("-d", "--consumeBroadcastEnable", "broadcast", type=bool, default=True, show_default=True),
         click.option("-o", "--consumeMessageOrderly", "orderly", type=bool, default=False, show_default=True),
         where=True)
async def update_sub_group(t: Tools, group: str, cluster: str | None, broker: str | None, retry_max: int,
                           enable: bool, broadcast: bool, orderly: bool) -> Shown:
    """Create or update a subscription group."""
    doc = {"groupName": group, "consumeEnable": enable, "consumeBroadcastEnable": broadcast,
           "retryMaxTimes": retry_max, "consumeMessageOrderly": orderly}
    async with t.admin() as a:
        addrs = await _invoke_all(a, await a.masters(cluster, broker), RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                  {}, json.dumps(doc).encode(), what=f"updateSubGroup {group}")
    return _done({**doc, "brokerAddrs": addrs}, f"create subscription group to {', '.join(addrs)} success.")


@command("consumerProgress", GROUP_NAME, click.option("-t", "--topicName", "topic", default=None))
async def consumer_progress(t: Tools, group: str, topic: str | None) -> Shown:
    """Broker offset, consumer offset and lag per queue."""
    async with t.admin() as a:
        progress = await a.consumer_progress(group, topic)
    rows = [{"topic": p.queue.topic, "brokerName": p.queue.broker_name, "queueId": p.queue.queue_id,
             "brokerOffset": p.max_offset, "consumerOffset": p.committed, "diff": p.lag} for p in progress]
    doc = {"consumerGroup": group, "offsetTable": rows, "diffTotal": sum(r["diff"] for r in rows)}
    return Shown(doc, ["#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff"],
                 [list(r.values()) for r in rows], [f"Diff Total: {doc['diffTotal']}"])


def _offsets(result: dict[Any, int]) -> Shown:
    """Offsets per queue after a reset, as mqadmin prints them."""
    rows = [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off} for mq, off in sorted(result.items())]
    return Shown(rows, ["#brokerName", "#queueId", "#offset"], [list(r.values()) for r in rows])


@command("resetOffsetByTime", GROUP, TOPIC,
         click.option("-s", "--timestamp", required=True, help="epoch ms, 'now', or yyyy-MM-dd#HH:mm:ss:SSS"))
async def reset_offset_by_time(t: Tools, group: str, topic: str, timestamp: str) -> Shown:
    """Move a group to the offsets of a time (online consumers are told, as mqadmin does)."""
    ts = _timestamp(timestamp)
    async with t.admin() as a:
        return _offsets(await a.reset_offset_by_timestamp(group, topic, ts))


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


def _message_doc(m: Any) -> dict[str, Any]:
    return {"topic": m.topic, "msgId": m.msg_id, "offsetMsgId": m.offset_msg_id,
            "tags": m.tags, "keys": m.keys, "queueId": m.queue_id, "queueOffset": m.queue_offset,
            "bornTimestamp": m.born_timestamp, "storeTimestamp": m.store_timestamp, "bornHost": m.born_host,
            "storeHost": m.store_host, "reconsumeTimes": m.reconsume_times, "properties": dict(m.properties),
            "body": m.body.decode("utf-8", "replace")}


@command("queryMsgById", click.option("-i", "--msgId", "msg_id", required=True,
                                      help="offset msgId, or the unique key with -t"),
         ANY_TOPIC, click.option("-g", "--consumerGroup", "group", default=None, help="with -d: consume it directly"),
         click.option("-d", "--clientId", "client_id", default=None, help="the member of -g that consumes it"))
async def query_msg_by_id(t: Tools, msg_id: str, topic: str | None, group: str | None, client_id: str | None) -> Shown:
    """One message by its offset msgId (or unique key with -t); with -g and -d, consumed directly
    by that member's listener (CONSUME_MESSAGE_DIRECTLY), as mqadmin does."""
    return await show_message(t, msg_id, topic, group, client_id)


async def show_message(t: Tools, msg_id: str, topic: str | None, group: str | None, client_id: str | None) -> Shown:
    """One message (by unique key when ``topic`` is given, else by offset msgId); with a group and a
    client id, also have that member consume it (CONSUME_MESSAGE_DIRECTLY), with its result."""
    if bool(group) != bool(client_id):
        raise click.UsageError("-g and -d go together")
    async with t.admin() as a:
        m = await (a.query_message_by_id(topic, msg_id) if topic else a.view_message(msg_id))
        doc = _message_doc(m)
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
         click.option("-c", "--tags", default=None))
async def send_message(t: Tools, topic: str, body: str, key: str | None, tags: str | None) -> Shown:
    """Send one message."""
    async with t.producer() as p:
        r = await p.send(Message(topic, body, tags=tags, keys=key))
    doc = {"brokerName": r.queue.broker_name, "queueId": r.queue.queue_id, "sendStatus": r.status.value,
           "msgId": r.msg_id, "offsetMsgId": r.offset_msg_id, "queueOffset": r.queue_offset}
    return Shown(doc, list(doc), [list(doc.values())])


def _messages(messages: list[Any], columns: list[str], keys: list[str]) -> Shown:
    """Browsed messages: a row of ``keys`` of each (the body cut at 60 characters), all of them with --json."""
    docs = [_message_doc(m) for m in messages]
    return Shown(docs, columns, [[d[k][:60] if k == "body" else d[k] for k in keys] for d in docs])


@command("consumeMessage", TOPIC,
         click.option("-g", "--consumerGroup", "group", default="TOOLS_CONSUMER", show_default=True),
         click.option("-c", "--count", type=int, default=32, show_default=True))
async def consume_message(t: Tools, topic: str, group: str, count: int) -> Shown:
    """Print up to COUNT messages of the topic from the start of every queue (commits nothing)."""
    out: list[Any] = []
    async with t.consumer(group) as pc:
        for mq in await pc.fetch_queues(topic):
            offset = await pc.min_offset(mq)
            while len(out) < count:
                r = await pc.pull(mq, offset, min(32, count - len(out)))
                if r.status is not PullStatus.FOUND:
                    break
                out += r.messages
                offset = r.next_begin_offset
    return _messages(out, ["#QID", "#Offset", "#Tags", "#Body"], ["queueId", "queueOffset", "tags", "body"])


from rmq.client import cli_ops  # noqa: E402,F401  (registers the rest of mqadmin's commands on main)

if __name__ == "__main__":  # pragma: no cover
    main()
