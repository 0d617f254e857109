"""``rmqadmin``: mqadmin's commands and flags over rmq's Admin client (click + rich).

Every command takes ``-n`` (name servers, default ``$NAMESRV_ADDR`` or 127.0.0.1:9876) and ``--json``
(exactly one JSON document on stdout, RocketMQ's field names); tables otherwise. An error is one
line on stderr and exit status 1. ACL: ``--access-key``/``--secret-key`` (or ``$RMQ_ACCESS_KEY`` /
``$RMQ_SECRET_KEY``) sign every request.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
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


# ---------------------------------------------------------------------------------------------- cluster


@main.command("clusterList")
@_admin_options
def cluster_list(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool) -> None:
    """Clusters, brokers and their runtime figures."""

    async def go() -> list[dict[str, Any]]:
        async with Admin(namesrv, credentials=_creds(access_key, secret_key)) as a:
            info = await a.cluster_info()
            out = []
            for cluster, names in sorted(info.clusters.items()):
                for name in sorted(names):
                    for bid, addr in sorted(info.brokers.get(name, {}).items()):
                        try:
                            rt = await a.broker_runtime_info(addr)
                        except ClientError:
                            rt = {}
                        out.append({"clusterName": cluster, "brokerName": name, "brokerId": bid, "brokerAddr": addr,
                                    "putTps": rt.get("putTps", ""), "getTransferedTps": rt.get("getTransferedTps", ""),
                                    "brokerVersionDesc": rt.get("brokerVersionDesc", ""),
                                    "msgPutTotalTodayNow": rt.get("msgPutTotalTodayNow", "")})
            return out

    rows = _run(go)
    cols = ["clusterName", "brokerName", "brokerId", "brokerAddr", "putTps", "getTransferedTps"]
    _emit(as_json, rows, ["#Cluster Name", "#Broker Name", "#BID", "#Addr", "#InTPS", "#OutTPS"],
          [[r[c] for c in cols] for r in rows])


@main.command("brokerStatus")
@_admin_options
@click.option("-b", "--brokerAddr", "broker", required=True, help="broker host:port")
def broker_status(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, broker: str) -> None:
    """A broker's runtime info (GET_BROKER_RUNTIME_INFO)."""

    async def go() -> dict[str, str]:
        async with Admin(namesrv, credentials=_creds(access_key, secret_key)) as a:
            return await a.broker_runtime_info(broker)

    info = _run(go)
    _emit(as_json, info, ["key", "value"], [[k, v] for k, v in sorted(info.items())])


@main.command("getBrokerConfig")
@_admin_options
@click.option("-b", "--brokerAddr", "broker", required=True)
def get_broker_config(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, broker: str) -> None:
    """A broker's configuration (GET_BROKER_CONFIG)."""

    async def go() -> dict[str, str]:
        async with Admin(namesrv, credentials=_creds(access_key, secret_key)) as a:
            r = await a.instance.invoke(broker, RequestCode.GET_BROKER_CONFIG, {})
            text = (r.body or b"").decode("utf-8", "replace")
            return dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln)

    cfg = _run(go)
    _emit(as_json, cfg, ["key", "value"], [[k, v] for k, v in sorted(cfg.items())])


@main.command("updateBrokerConfig")
@_admin_options
@click.option("-b", "--brokerAddr", "broker", default=None)
@click.option("-c", "--clusterName", "cluster", default=None)
@click.option("-k", "--key", required=True)
@click.option("-v", "--value", required=True)
def update_broker_config(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool,
                         broker: str | None, cluster: str | None, key: str, value: str) -> None:
    """Change a setting of running brokers (UPDATE_BROKER_CONFIG; start-only settings are refused)."""
    if not cluster and not broker:
        raise click.UsageError("give -c clusterName or -b brokerAddr")

    async def go() -> list[str]:
        async with Admin(namesrv, credentials=_creds(access_key, secret_key)) as a:
            addrs = [broker] if broker else (await a.cluster_info()).master_addrs(cluster)
            for addr in addrs:
                await a.instance.invoke(addr, RequestCode.UPDATE_BROKER_CONFIG, {}, f"{key}={value}".encode(),
                                        what=f"updateBrokerConfig {key}")
            return addrs

    addrs = _run(go)
    if as_json:
        _emit(True, {"key": key, "value": value, "brokerAddrs": addrs}, [], [])
    else:
        click.echo(f"update broker config success, {', '.join(addrs)}")


# ---------------------------------------------------------------------------------------------- topics


@main.command("topicList")
@_admin_options
def topic_list(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool) -> None:
    """Every topic the name servers know."""

    async def go() -> list[str]:
        async with Admin(namesrv, credentials=_creds(access_key, secret_key)) as a:
            return await a.list_topics()

    topics = _run(go)
    if as_json:
        _emit(True, {"topicList": topics}, [], [])
    else:
        for t in topics:
            click.echo(t)


@main.command("updateTopic")
@_admin_options
@click.option("-t", "--topic", required=True)
@click.option("-c", "--clusterName", "cluster", default=None, help="create on every master of the cluster")
@click.option("-b", "--brokerAddr", "broker", default=None, help="create on this broker")
@click.option("-r", "--readQueueNums", "read", type=int, default=8, show_default=True)
@click.option("-w", "--writeQueueNums", "write", type=int, default=8, show_default=True)
@click.option("-p", "--perm", type=int, default=6, show_default=True)
@click.option("-o", "--order", is_flag=True, help="an order topic")
@click.option("-a", "--attributes", default="", help="RocketMQ 5 attributes, e.g. +message.type=FIFO")
def update_topic(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, topic: str,
                 cluster: str | None, broker: str | None, read: int, write: int, perm: int, order: bool,
                 attributes: str) -> None:
    """Create or update a topic (UPDATE_AND_CREATE_TOPIC)."""
    if not cluster and not broker:
        raise click.UsageError("give -c clusterName or -b brokerAddr")

    async def go() -> list[str]:
        async with Admin(namesrv, credentials=_creds(access_key, secret_key)) as a:
            addrs = [broker] if broker else (await a.cluster_info()).master_addrs(cluster)
            if not addrs:
                raise ClientError(f"no master in cluster {cluster!r}")
            for addr in addrs:
                ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(read),
                       "writeQueueNums": str(write), "perm": str(perm), "topicFilterType": "SINGLE_TAG",
                       "topicSysFlag": "0", "order": str(order).lower()}
                if attributes:
                    ext["attributes"] = attributes
                await a.instance.invoke(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, ext, what=f"updateTopic {topic}")
            return addrs

    addrs = _run(go)
    doc = {"topicName": topic, "readQueueNums": read, "writeQueueNums": write, "perm": perm, "brokerAddrs": addrs}
    if as_json:
        _emit(True, doc, [], [])
    else:
        click.echo(f"create topic to {', '.join(addrs)} success.")


@main.command("deleteTopic")
@_admin_options
@click.option("-t", "--topic", required=True)
@click.option("-c", "--clusterName", "cluster", default=None)
def delete_topic(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, topic: str,
                 cluster: str | None) -> None:
    """Delete a topic from the brokers and the name servers."""

    async def go() -> None:
        async with Admin(namesrv, credentials=_creds(access_key, secret_key)) as a:
            await a.delete_topic(topic, cluster)

    _run(go)
    if as_json:
        _emit(True, {"topicName": topic, "deleted": True}, [], [])
    else:
        click.echo(f"delete topic [{topic}] success.")


@main.command("topicRoute")
@_admin_options
@click.option("-t", "--topic", required=True)
def topic_route(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, topic: str) -> None:
    """The topic's route: brokers and queue counts."""

    async def go() -> Any:
        async with Admin(namesrv, credentials=_creds(access_key, secret_key)) as a:
            return await a.topic_route(topic)

    r = _run(go)
    doc = {"brokerDatas": [{"brokerName": b.broker_name, "cluster": b.cluster, "brokerAddrs": {str(k): v for k, v in
                                                                                                b.addrs.items()}}
                           for b in r.broker_datas],
           "queueDatas": [{"brokerName": q.broker_name, "readQueueNums": q.read_queue_nums,
                           "writeQueueNums": q.write_queue_nums, "perm": q.perm} for q in r.queue_datas]}
    _emit(as_json, doc, ["#Broker", "#ReadQueues", "#WriteQueues", "#Perm"],
          [[q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"]] for q in doc["queueDatas"]])


@main.command("topicStatus")
@_admin_options
@click.option("-t", "--topic", required=True)
def topic_status(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, topic: str) -> None:
    """Min and max offset of every queue."""

    async def go() -> Any:
        async with Admin(namesrv, credentials=_creds(access_key, secret_key)) as a:
            return await a.topic_stats(topic)

    stats = _run(go)
    rows = [{"brokerName": s.queue.broker_name, "queueId": s.queue.queue_id, "minOffset": s.min_offset,
             "maxOffset": s.max_offset, "lastUpdateTimestamp": s.last_update_timestamp} for s in stats]
    _emit(as_json, rows, ["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"],
          [[r["brokerName"], r["queueId"], r["minOffset"], r["maxOffset"], r["lastUpdateTimestamp"]] for r in rows])


# ---------------------------------------------------------------------------------------------- groups


@main.command("updateSubGroup")
@_admin_options
@click.option("-g", "--groupName", "group", required=True)
@click.option("-c", "--clusterName", "cluster", default=None)
@click.option("-b", "--brokerAddr", "broker", default=None)
@click.option("-r", "--retryMaxTimes", "retry_max", type=int, default=16, show_default=True)
@click.option("-s", "--consumeEnable", "enable", type=bool, default=True, show_default=True)
@click.option("-d", "--consumeBroadcastEnable", "broadcast", type=bool, default=True, show_default=True)
@click.option("-o", "--consumeMessageOrderly", "orderly", type=bool, default=False, show_default=True)
def update_sub_group(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, group: str,
                     cluster: str | None, broker: str | None, retry_max: int, enable: bool, broadcast: bool,
                     orderly: bool) -> None:
    """Create or update a subscription group."""
    if not cluster and not broker:
        raise click.UsageError("give -c clusterName or -b brokerAddr")
    doc = {"groupName": group, "consumeEnable": enable, "consumeBroadcastEnable": broadcast,
           "retryMaxTimes": retry_max, "consumeMessageOrderly": orderly}

    async def go() -> list[str]:
        async with Admin(namesrv, credentials=_creds(access_key, secret_key)) as a:
            addrs = [broker] if broker else (await a.cluster_info()).master_addrs(cluster)
            for addr in addrs:
                await a.instance.invoke(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                                        json.dumps(doc).encode(), what=f"updateSubGroup {group}")
            return addrs

    addrs = _run(go)
    if as_json:
        _emit(True, {**doc, "brokerAddrs": addrs}, [], [])
    else:
        click.echo(f"create subscription group to {', '.join(addrs)} success.")


@main.command("consumerProgress")
@_admin_options
@click.option("-g", "--groupName", "group", required=True)
@click.option("-t", "--topicName", "topic", default=None)
def consumer_progress(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, group: str,
                      topic: str | None) -> None:
    """Broker offset, consumer offset and lag per queue."""

    async def go() -> Any:
        async with Admin(namesrv, credentials=_creds(access_key, secret_key)) as a:
            return await a.consumer_progress(group, topic)

    progress = _run(go)
    rows = [{"topic": p.queue.topic, "brokerName": p.queue.broker_name, "queueId": p.queue.queue_id,
             "brokerOffset": p.max_offset, "consumerOffset": p.committed, "diff": p.lag} for p in progress]
    doc = {"consumerGroup": group, "offsetTable": rows, "diffTotal": sum(r["diff"] for r in rows)}
    _emit(as_json, doc, ["#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff"],
          [[r["topic"], r["brokerName"], r["queueId"], r["brokerOffset"], r["consumerOffset"], r["diff"]]
           for r in rows])
    if not as_json:
        click.echo(f"Diff Total: {doc['diffTotal']}")


@main.command("resetOffsetByTime")
@_admin_options
@click.option("-g", "--group", required=True)
@click.option("-t", "--topic", required=True)
@click.option("-s", "--timestamp", required=True, help="epoch ms, 'now', or yyyy-MM-dd#HH:mm:ss:SSS")
def reset_offset_by_time(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, group: str,
                         topic: str, timestamp: str) -> None:
    """Move a group to the offsets of a time (online consumers are told, as mqadmin does)."""
    ts = _timestamp(timestamp)

    async def go() -> Any:
        async with Admin(namesrv, credentials=_creds(access_key, secret_key)) as a:
            return await a.reset_offset_by_timestamp(group, topic, ts)

    result = _run(go)
    rows = [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off} for mq, off in sorted(result.items())]
    _emit(as_json, rows, ["#brokerName", "#queueId", "#offset"], [[r["brokerName"], r["queueId"], r["offset"]]
                                                                 for r in rows])


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


@main.command("queryMsgById")
@_admin_options
@click.option("-i", "--msgId", "msg_id", required=True, help="offset msgId, or the unique key with -t")
@click.option("-t", "--topic", default=None)
@click.option("-g", "--consumerGroup", "group", default=None, help="with -d: consume it directly")
@click.option("-d", "--clientId", "client_id", default=None, help="the member of -g that consumes it")
def query_msg_by_id(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, msg_id: str,
                    topic: str | None, group: str | None, client_id: str | None) -> None:
    """One message by its offset msgId (or unique key with -t); with -g and -d, consumed directly
    by that member's listener (CONSUME_MESSAGE_DIRECTLY), as mqadmin does."""
    show_message(namesrv, _creds(access_key, secret_key), as_json, msg_id, topic, group, client_id)


def show_message(namesrv: str, creds: tuple[str, str] | None, as_json: bool, msg_id: str, topic: str | None,
                 group: str | None, client_id: str | None) -> None:
    """Print one message (by unique key when ``topic`` is given, else by offset msgId); with a group
    and a client id, also have that member consume it (CONSUME_MESSAGE_DIRECTLY) and print the result."""
    if bool(group) != bool(client_id):
        raise click.UsageError("-g and -d go together")

    async def go() -> Any:
        async with Admin(namesrv, credentials=creds) as a:
            m = await (a.query_message_by_id(topic, msg_id) if topic else a.view_message(msg_id))
            if group and client_id:
                return m, await a.consume_message_directly(group, client_id, m.offset_msg_id, m.topic)
            return m, None

    m, result = _run(go)
    doc = _message_doc(m)
    if result is not None:
        doc["consumeMessageDirectlyResult"] = result
    _emit(as_json, doc, ["field", "value"], [[k, v] for k, v in doc.items()])


@main.command("queryMsgByKey")
@_admin_options
@click.option("-t", "--topic", required=True)
@click.option("-k", "--msgKey", "key", required=True)
def query_msg_by_key(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, topic: str,
                     key: str) -> None:
    """Messages with a key (the broker's index)."""

    async def go() -> Any:
        async with Admin(namesrv, credentials=_creds(access_key, secret_key)) as a:
            return await a.query_message(topic, key)

    docs = [_message_doc(m) for m in _run(go)]
    _emit(as_json, docs, ["#Message ID", "#QID", "#Offset"], [[d["msgId"], d["queueId"], d["queueOffset"]] for d in docs])


@main.command("sendMessage")
@_admin_options
@click.option("-t", "--topic", required=True)
@click.option("-p", "--body", required=True)
@click.option("-k", "--key", default=None)
@click.option("-c", "--tags", default=None)
def send_message(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, topic: str, body: str,
                 key: str | None, tags: str | None) -> None:
    """Send one message."""

    async def go() -> Any:
        async with Producer("TOOLS_PRODUCER", namesrv, credentials=_creds(access_key, secret_key)) as p:
            return await p.send(Message(topic, body, tags=tags, keys=key))

    r = _run(go)
    doc = {"brokerName": r.queue.broker_name, "queueId": r.queue.queue_id, "sendStatus": r.status.value,
           "msgId": r.msg_id, "offsetMsgId": r.offset_msg_id, "queueOffset": r.queue_offset}
    _emit(as_json, doc, list(doc), [list(doc.values())])


@main.command("consumeMessage")
@_admin_options
@click.option("-t", "--topic", required=True)
@click.option("-g", "--consumerGroup", "group", default="TOOLS_CONSUMER", show_default=True)
@click.option("-c", "--count", type=int, default=32, show_default=True)
def consume_message(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, topic: str,
                    group: str, count: int) -> None:
    """Print up to COUNT messages of the topic from the start of every queue (commits nothing)."""

    async def go() -> list[Any]:
        out: list[Any] = []
        async with PullConsumer(group, namesrv, credentials=_creds(access_key, secret_key)) as pc:
            for mq in await pc.fetch_queues(topic):
                offset = await pc.min_offset(mq)
                while len(out) < count:
                    r = await pc.pull(mq, offset, min(32, count - len(out)))
                    if r.status is not PullStatus.FOUND:
                        break
                    out += r.messages
                    offset = r.next_begin_offset
        return out

    docs = [_message_doc(m) for m in _run(go)]
    _emit(as_json, docs, ["#QID", "#Offset", "#Tags", "#Body"],
          [[d["queueId"], d["queueOffset"], d["tags"], d["body"][:60]] for d in docs])


from rmq.client import cli_ops  # noqa: E402,F401  (registers the rest of mqadmin's commands on main)

if __name__ == "__main__":  # pragma: no cover
    main()
