"""``rmqadmin`` commands beyond the basics: group offsets and members, message browsing and
re-delivery (DLQ included), store maintenance and the name server's configuration.

Registered on ``rmq.client.cli.main``; names and flags are mqadmin's.
"""

from __future__ import annotations

from typing import Any

import click

from rmq.client import Admin, ClientError, Message, Producer, PullConsumer, PullStatus
from rmq.client.cli import _admin_options, _creds, _emit, _message_doc, _run, _timestamp, main, show_message
from rmq.kernel.model import MessageQueue
from rmq.protocol.codes import RequestCode

_SKIP_PROPS = {"MIN_OFFSET", "MAX_OFFSET", "UNIQ_KEY", "CLUSTER", "REAL_TOPIC", "REAL_QID", "RETRY_TOPIC",
               "ORIGIN_MESSAGE_ID", "RECONSUME_TIME", "MAX_RECONSUME_TIMES", "DELAY", "WAIT", "TRAN_MSG"}


def _admin(namesrv: str, ak: str | None, sk: str | None) -> Admin:
    return Admin(namesrv, credentials=_creds(ak, sk))


def _where(cluster: str | None, broker: str | None) -> None:
    if not cluster and not broker:
        raise click.UsageError("give -c clusterName or -b brokerAddr")


def _done(as_json: bool, doc: dict[str, Any], line: str) -> None:
    if as_json:
        _emit(True, doc, [], [])
    else:
        click.echo(line)


# ---------------------------------------------------------------------------------------------- topics


@main.command("topicClusterList")
@_admin_options
@click.option("-t", "--topic", required=True)
def topic_cluster_list(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool,
                       topic: str) -> None:
    """The clusters a topic lives in."""

    async def go() -> list[str]:
        async with _admin(namesrv, access_key, secret_key) as a:
            route = await a.topic_route(topic)
            return sorted({bd.cluster for bd in route.broker_datas})

    clusters = _run(go)
    if as_json:
        _emit(True, {"topic": topic, "clusterList": clusters}, [], [])
    else:
        for c in clusters:
            click.echo(c)


@main.command("updateTopicPerm")
@_admin_options
@click.option("-t", "--topic", required=True)
@click.option("-b", "--brokerAddr", "broker", default=None)
@click.option("-c", "--clusterName", "cluster", default=None)
@click.option("-p", "--perm", type=click.Choice(["2", "4", "6"]), required=True, help="2 write, 4 read, 6 both")
def update_topic_perm(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, topic: str,
                      broker: str | None, cluster: str | None, perm: str) -> None:
    """Change a topic's permission where it exists, keeping its other settings."""
    _where(cluster, broker)

    async def go() -> list[str]:
        async with _admin(namesrv, access_key, secret_key) as a:
            addrs = [broker] if broker else (await a.cluster_info()).master_addrs(cluster)
            done = []
            for addr in addrs:
                tc = await a.topic_config(addr, topic)
                ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(tc["readQueueNums"]),
                       "writeQueueNums": str(tc["writeQueueNums"]), "perm": perm,
                       "topicFilterType": tc.get("topicFilterType", "SINGLE_TAG"),
                       "topicSysFlag": str(tc.get("topicSysFlag", 0)), "order": str(tc.get("order", False)).lower()}
                await a.instance.invoke(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, ext, what=f"updateTopicPerm {topic}")
                done.append(addr)
            return done

    addrs = _run(go)
    _done(as_json, {"topic": topic, "perm": int(perm), "brokerAddrs": addrs},
          f"update topic perm from {', '.join(addrs)} to {perm} success.")


# ---------------------------------------------------------------------------------------------- groups


@main.command("deleteSubGroup")
@_admin_options
@click.option("-g", "--groupName", "group", required=True)
@click.option("-b", "--brokerAddr", "broker", default=None)
@click.option("-c", "--clusterName", "cluster", default=None)
@click.option("-r", "--removeOffset", "remove_offset", type=bool, default=False, show_default=True)
def delete_sub_group(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, group: str,
                     broker: str | None, cluster: str | None, remove_offset: bool) -> None:
    """Delete a subscription group (and its offsets with -r true)."""
    _where(cluster, broker)

    async def go() -> list[str]:
        async with _admin(namesrv, access_key, secret_key) as a:
            addrs = [broker] if broker else (await a.cluster_info()).master_addrs(cluster)
            for addr in addrs:
                await a.instance.invoke(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, {
                    "groupName": group, "removeOffset": str(remove_offset).lower()}, what=f"deleteSubGroup {group}")
            return addrs

    addrs = _run(go)
    _done(as_json, {"groupName": group, "brokerAddrs": addrs},
          f"delete subscription group [{group}] from {', '.join(addrs)} success.")


@main.command("consumerConnection")
@_admin_options
@click.option("-g", "--consumerGroup", "group", required=True)
@click.option("-b", "--brokerAddr", "broker", default=None)
def consumer_connection(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, group: str,
                        broker: str | None) -> None:
    """A group's connected members and subscriptions."""

    async def go() -> dict[str, Any]:
        async with _admin(namesrv, access_key, secret_key) as a:
            return await a.consumer_connection(group, broker)

    doc = _run(go)
    conns = doc.get("connectionSet") or []
    _emit(as_json, doc, ["#ClientId", "#ClientAddr", "#Language", "#Version"],
          [[c.get("clientId"), c.get("clientAddr"), c.get("language"), c.get("version")] for c in conns])
    if not as_json:
        for topic, sub in sorted((doc.get("subscriptionTable") or {}).items()):
            click.echo(f"{topic}  {sub.get('subString', '*')}")
        click.echo(f"ConsumeType: {doc.get('consumeType')}  MessageModel: {doc.get('messageModel')}  "
                   f"ConsumeFromWhere: {doc.get('consumeFromWhere')}")


@main.command("producerConnection")
@_admin_options
@click.option("-g", "--producerGroup", "group", required=True)
@click.option("-t", "--topic", required=True)
def producer_connection(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, group: str,
                        topic: str) -> None:
    """A producer group's connections (on the brokers of a topic)."""

    async def go() -> dict[str, Any]:
        async with _admin(namesrv, access_key, secret_key) as a:
            return await a.producer_connection(group, topic)

    doc = _run(go)
    conns = doc.get("connectionSet") or []
    _emit(as_json, doc, ["#ClientId", "#ClientAddr", "#Language", "#Version"],
          [[c.get("clientId"), c.get("clientAddr"), c.get("language"), c.get("version")] for c in conns])


@main.command("consumerStatus")
@_admin_options
@click.option("-g", "--consumerGroup", "group", required=True)
@click.option("-i", "--clientId", "client_id", default=None, help="one member (default: every member)")
@click.option("-s", "--jstackEnable", "jstack", is_flag=True)
def consumer_status(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, group: str,
                    client_id: str | None, jstack: bool) -> None:
    """Each member's running info (GET_CONSUMER_RUNNING_INFO through its broker)."""

    async def go() -> dict[str, Any]:
        async with _admin(namesrv, access_key, secret_key) as a:
            ids = [client_id] if client_id else [c["clientId"] for c in
                                                 (await a.consumer_connection(group)).get("connectionSet") or []]
            return {cid: await a.consumer_running_info(group, cid, jstack) for cid in ids}

    doc = _run(go)
    rows = []
    for cid, info in doc.items():
        props = info.get("properties") or {}
        rows.append([cid, props.get("consumeType", ""), props.get("messageModel", ""),
                     ", ".join(s.get("topic", "") for s in info.get("subscriptionSet") or [])])
    _emit(as_json, doc, ["#ClientId", "#ConsumeType", "#MessageModel", "#Topics"], rows)


@main.command("getConsumerStatus")
@_admin_options
@click.option("-g", "--group", required=True)
@click.option("-t", "--topic", required=True)
@click.option("-i", "--originClientId", "client_id", default="")
def get_consumer_status(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, group: str,
                        topic: str, client_id: str) -> None:
    """The offsets each member holds on a topic (INVOKE_BROKER_TO_GET_CONSUMER_STATUS)."""

    async def go() -> dict[str, dict[MessageQueue, int]]:
        async with _admin(namesrv, access_key, secret_key) as a:
            return await a.consumer_status(group, topic, client_id)

    status = _run(go)
    rows = [[cid, mq.broker_name, mq.queue_id, off] for cid, table in status.items()
            for mq, off in sorted(table.items(), key=lambda kv: (kv[0].broker_name, kv[0].queue_id))]
    doc = {cid: [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off} for mq, off in t.items()]
           for cid, t in status.items()}
    _emit(as_json, doc, ["#ClientId", "#Broker Name", "#QID", "#Offset"], rows)


@main.command("cloneGroupOffset")
@_admin_options
@click.option("-s", "--srcGroup", "src", required=True)
@click.option("-d", "--destGroup", "dest", required=True)
@click.option("-t", "--topic", default=None)
@click.option("-o", "--offline", type=bool, default=False, show_default=True)
def clone_group_offset(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, src: str,
                       dest: str, topic: str | None, offline: bool) -> None:
    """Copy one group's offsets to another."""

    async def go() -> list[str]:
        async with _admin(namesrv, access_key, secret_key) as a:
            return await a.clone_group_offset(src, dest, topic, offline)

    addrs = _run(go)
    _done(as_json, {"srcGroup": src, "destGroup": dest, "topic": topic, "brokerAddrs": addrs},
          f"clone group offset success. srcGroup[{src}], destGroup[{dest}], topic[{topic or ''}]")


@main.command("skipAccumulatedMessage")
@_admin_options
@click.option("-g", "--group", required=True)
@click.option("-t", "--topic", required=True)
@click.option("-f", "--force", type=bool, default=True, show_default=True)
def skip_accumulated(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, group: str,
                     topic: str, force: bool) -> None:
    """Move a group to the end of every queue (online members are told)."""

    async def go() -> Any:
        async with _admin(namesrv, access_key, secret_key) as a:
            return await a.reset_offset_by_timestamp(group, topic, -1, force=force)

    result = _run(go)
    rows = [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off} for mq, off in sorted(result.items())]
    _emit(as_json, rows, ["#brokerName", "#queueId", "#offset"], [list(r.values()) for r in rows])


# ---------------------------------------------------------------------------------------------- messages


async def _pull_range(pc: PullConsumer, topic: str, begin_ms: int | None, end_ms: int | None, limit: int,
                      expression: str = "*") -> list[Any]:
    out: list[Any] = []
    for mq in await pc.fetch_queues(topic):
        offset = await pc.search_offset(mq, begin_ms) if begin_ms else await pc.min_offset(mq)
        end = await pc.search_offset(mq, end_ms) + 1 if end_ms else await pc.max_offset(mq)
        while offset < end and len(out) < limit:
            r = await pc.pull(mq, offset, min(32, end - offset), expression=expression)
            if r.status is not PullStatus.FOUND:
                break
            out += [m for m in r.messages if end_ms is None or m.store_timestamp <= end_ms]
            offset = r.next_begin_offset
    return out[:limit]


@main.command("printMsg")
@_admin_options
@click.option("-t", "--topic", required=True, help="any topic, %DLQ%<group> to browse a dead-letter queue")
@click.option("-s", "--subExpression", "expression", default="*", show_default=True)
@click.option("-b", "--beginTimestamp", "begin", default=None, help="epoch ms or yyyy-MM-dd#HH:mm:ss:SSS")
@click.option("-e", "--endTimestamp", "end", default=None)
@click.option("-l", "--limit", type=int, default=1000, show_default=True)
def print_msg(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, topic: str,
              expression: str, begin: str | None, end: str | None, limit: int) -> None:
    """Print a topic's messages (commits nothing)."""

    async def go() -> list[Any]:
        async with PullConsumer("TOOLS_CONSUMER", namesrv, credentials=_creds(access_key, secret_key)) as pc:
            return await _pull_range(pc, topic, _timestamp(begin) if begin else None,
                                     _timestamp(end) if end else None, limit, expression)

    docs = [_message_doc(m) for m in _run(go)]
    _emit(as_json, docs, ["#QID", "#Offset", "#MsgId", "#Tags", "#Keys", "#Body"],
          [[d["queueId"], d["queueOffset"], d["msgId"], d["tags"], d["keys"], d["body"][:60]] for d in docs])


@main.command("queryMsgByOffset")
@_admin_options
@click.option("-t", "--topic", required=True)
@click.option("-b", "--brokerName", "broker_name", required=True)
@click.option("-i", "--queueId", "queue_id", type=int, required=True)
@click.option("-o", "--offset", type=int, required=True)
def query_msg_by_offset(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, topic: str,
                        broker_name: str, queue_id: int, offset: int) -> None:
    """The message at a queue offset."""

    async def go() -> Any:
        async with PullConsumer("TOOLS_CONSUMER", namesrv, credentials=_creds(access_key, secret_key)) as pc:
            await pc.fetch_queues(topic)
            r = await pc.pull(MessageQueue(topic, broker_name, queue_id), offset, 1)
            if r.status is not PullStatus.FOUND or not r.messages:
                raise ClientError(f"no message at {topic}/{broker_name}/{queue_id}/{offset}: {r.status.name}")
            return r.messages[0]

    doc = _message_doc(_run(go))
    _emit(as_json, doc, ["field", "value"], [[k, v] for k, v in doc.items()])


@main.command("queryMsgByUniqueKey")
@_admin_options
@click.option("-i", "--msgId", "msg_id", required=True, help="the client msgId (UNIQ_KEY)")
@click.option("-t", "--topic", required=True)
@click.option("-g", "--consumerGroup", "group", default=None, help="with -d: give it to that member's listener")
@click.option("-d", "--clientId", "client_id", default=None)
def query_msg_by_unique_key(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool,
                            msg_id: str, topic: str, group: str | None, client_id: str | None) -> None:
    """A message by its unique key; with -g and -d, consumed directly by that member."""
    show_message(namesrv, _creds(access_key, secret_key), as_json, msg_id, topic, group, client_id)


@main.command("resendMessageToGroup")
@_admin_options
@click.option("-i", "--msgId", "msg_id", required=True, help="offset msgId (as printMsg shows)")
@click.option("-g", "--consumerGroup", "group", required=True)
@click.option("-d", "--clientId", "client_id", default=None, help="consume directly by this member instead")
def resend_message_to_group(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool,
                            msg_id: str, group: str, client_id: str | None) -> None:
    """Deliver a stored message (a DLQ one included) to a consumer group again: sent to the group's
    retry topic, so only that group sees it; with -d, handed to one member's listener at once."""

    async def go() -> dict[str, Any]:
        async with _admin(namesrv, access_key, secret_key) as a:
            m = await a.view_message(msg_id)
            if client_id:
                return await a.consume_message_directly(group, client_id, msg_id, m.topic)
            props = {k: v for k, v in m.properties.items() if k not in _SKIP_PROPS and k not in ("TAGS", "KEYS")}
            props.setdefault("RETRY_TOPIC", m.properties.get("RETRY_TOPIC") or m.properties.get("REAL_TOPIC")
                             or m.topic)
            async with Producer("TOOLS_RESEND", namesrv, credentials=_creds(access_key, secret_key)) as p:
                r = await p.send(Message(f"%RETRY%{group}", m.body, tags=m.tags, keys=m.keys, properties=props))
            return {"msgId": r.msg_id, "offsetMsgId": r.offset_msg_id, "topic": f"%RETRY%{group}",
                    "sendStatus": r.status.value}

    doc = _run(go)
    _emit(as_json, doc, ["field", "value"], [[k, v] for k, v in doc.items()])


# ---------------------------------------------------------------------------------------------- brokers


def _maintenance(code: int, line: str) -> Any:
    @_admin_options
    @click.option("-b", "--brokerAddr", "broker", default=None)
    @click.option("-c", "--cluster", "cluster", default=None)
    def command(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, broker: str | None,
                cluster: str | None) -> None:
        _where(cluster, broker)

        async def go() -> list[str]:
            async with _admin(namesrv, access_key, secret_key) as a:
                return await a.broker_maintenance(code, cluster, broker)

        addrs = _run(go)
        _done(as_json, {"brokerAddrs": addrs, "success": True}, f"{line} {', '.join(addrs)} success")

    return command


main.command("cleanExpiredCQ", help="Drop consume queues whose messages all expired.")(
    _maintenance(RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, "clean expired consume queues on"))
main.command("deleteExpiredCommitLog", help="Delete expired commitlog files now, whatever deleteWhen says.")(
    _maintenance(RequestCode.DELETE_EXPIRED_COMMITLOG, "delete expired commitlog on"))
main.command("cleanUnusedTopic", help="Forget the store's queues of topics the broker no longer has.")(
    _maintenance(RequestCode.CLEAN_UNUSED_TOPIC, "clean unused topics on"))


@main.command("brokerConsumeStats")
@_admin_options
@click.option("-b", "--brokerAddr", "broker", required=True)
@click.option("-o", "--order", type=bool, default=False, show_default=True)
def broker_consume_stats(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, broker: str,
                         order: bool) -> None:
    """Every group's progress on one broker (GET_BROKER_CONSUME_STATS)."""

    async def go() -> dict[str, Any]:
        async with _admin(namesrv, access_key, secret_key) as a:
            return await a.broker_consume_stats(broker, order)

    doc = _run(go)
    rows = [{"topic": mq.topic, "consumerGroup": g, "brokerName": mq.broker_name, "queueId": mq.queue_id,
             "brokerOffset": w.get("brokerOffset", 0), "consumerOffset": w.get("consumerOffset", 0),
             "diff": w.get("brokerOffset", 0) - w.get("consumerOffset", 0)}
            for g, table in sorted(doc["groups"].items())
            for mq, w in sorted(table.items(), key=lambda kv: (kv[0].topic, kv[0].queue_id))]
    _emit(as_json, {"brokerAddr": broker, "totalDiff": doc["totalDiff"], "offsetTable": rows},
          ["#Topic", "#Group", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff"],
          [list(r.values()) for r in rows])
    if not as_json:
        click.echo(f"Diff Total: {doc['totalDiff']}")


@main.command("statsAll")
@_admin_options
@click.option("-t", "--topic", default=None, help="one topic (default: every topic)")
def stats_all(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, topic: str | None) -> None:
    """Put and get rates per topic and group over the last minute (VIEW_BROKER_STATS_DATA)."""

    async def go() -> list[dict[str, Any]]:
        async with _admin(namesrv, access_key, secret_key) as a:
            topics = [topic] if topic else [t for t in await a.list_topics() if not t.startswith(("%", "rmq_sys"))]
            out = []
            for t in topics:
                try:
                    route = await a.topic_route(t)
                except ClientError:
                    continue
                groups = await a.topic_consumed_by(t)
                for bd in route.broker_datas:
                    addr = bd.master_addr
                    if addr is None:
                        continue
                    put = await _stats(a, addr, "TOPIC_PUT_NUMS", t)
                    for g in groups or [""]:
                        got = await _stats(a, addr, "GROUP_GET_NUMS", f"{t}@{g}") if g else None
                        out.append({"topic": t, "broker": bd.broker_name, "consumerGroup": g,
                                    "inTps": put["statsMinute"]["tps"] if put else 0.0,
                                    "outTps": got["statsMinute"]["tps"] if got else 0.0,
                                    "inMsg24Hour": put["statsDay"]["sum"] if put else 0,
                                    "outMsg24Hour": got["statsDay"]["sum"] if got else 0})
            return out

    rows = _run(go)
    _emit(as_json, rows, ["#Topic", "#Broker", "#Consumer Group", "#InTPS", "#OutTPS", "#InMsg24Hour", "#OutMsg24Hour"],
          [list(r.values()) for r in rows])


async def _stats(a: Admin, addr: str, name: str, key: str) -> dict[str, Any] | None:
    try:
        return await a.view_broker_stats(addr, name, key)
    except ClientError:
        return None


# ---------------------------------------------------------------------------------------------- name servers


@main.command("getNamesrvConfig")
@_admin_options
def get_namesrv_config(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool) -> None:
    """Every name server's configuration."""

    async def go() -> dict[str, dict[str, str]]:
        async with _admin(namesrv, access_key, secret_key) as a:
            return await a.namesrv_config()

    doc = _run(go)
    _emit(as_json, doc, ["#Namesrv", "key", "value"],
          [[addr, k, v] for addr, cfg in doc.items() for k, v in sorted(cfg.items())])


@main.command("updateNamesrvConfig")
@_admin_options
@click.option("-k", "--key", required=True)
@click.option("-v", "--value", required=True)
def update_namesrv_config(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, key: str,
                          value: str) -> None:
    """Change a running name server's setting (start-only settings are refused)."""

    async def go() -> list[str]:
        async with _admin(namesrv, access_key, secret_key) as a:
            return await a.update_namesrv_config(key, value)

    addrs = _run(go)
    _done(as_json, {"key": key, "value": value, "namesrvAddrs": addrs},
          f"update name server config success!{addrs}\n{key} : {value}")


@main.command("updateKvConfig")
@_admin_options
@click.option("-s", "--namespace", required=True)
@click.option("-k", "--key", required=True)
@click.option("-v", "--value", required=True)
def update_kv_config(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, namespace: str,
                     key: str, value: str) -> None:
    """Set a KV config item on every name server (e.g. ORDER_TOPIC_CONFIG)."""

    async def go() -> None:
        async with _admin(namesrv, access_key, secret_key) as a:
            await a.put_kv_config(namespace, key, value)

    _run(go)
    _done(as_json, {"namespace": namespace, "key": key, "value": value}, "create or update kv config to namespace success.")


@main.command("deleteKvConfig")
@_admin_options
@click.option("-s", "--namespace", required=True)
@click.option("-k", "--key", required=True)
def delete_kv_config(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, namespace: str,
                     key: str) -> None:
    """Delete a KV config item on every name server."""

    async def go() -> None:
        async with _admin(namesrv, access_key, secret_key) as a:
            await a.delete_kv_config(namespace, key)

    _run(go)
    _done(as_json, {"namespace": namespace, "key": key, "deleted": True}, "delete kv config from namespace success.")


# ---------------------------------------------------------------------------------------------- HA and controller


@main.command("haStatus")
@_admin_options
@click.option("-b", "--brokerAddr", "broker", default=None)
@click.option("-c", "--clusterName", "cluster", default=None)
def ha_status(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, broker: str | None,
              cluster: str | None) -> None:
    """Replication state of masters: role, connected slaves, how far each is behind."""
    _where(cluster, broker)
    keys = ("brokerRole", "haConnectionCount", "slaveAckOffset", "slaveFallBehindMuch", "haSlaves",
            "commitLogMaxOffset", "masterAddr", "masterConnected")

    async def go() -> dict[str, dict[str, str]]:
        async with _admin(namesrv, access_key, secret_key) as a:
            addrs = [broker] if broker else (await a.cluster_info()).master_addrs(cluster)
            out = {}
            for addr in addrs:
                rt = await a.broker_runtime_info(addr)
                out[addr] = {k: rt[k] for k in keys if k in rt}
            return out

    doc = _run(go)
    _emit(as_json, doc, ["#Broker", "key", "value"], [[addr, k, v] for addr, t in doc.items() for k, v in t.items()])


@main.command("getControllerMetaData")
@_admin_options
@click.option("-a", "--controllerAddress", "controller", required=True)
def get_controller_metadata(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool,
                            controller: str) -> None:
    """The controller group: leader, peers."""

    async def go() -> dict[str, str]:
        async with _admin(namesrv, access_key, secret_key) as a:
            return await a.controller_metadata(controller)

    doc = _run(go)
    _emit(as_json, doc, ["key", "value"], [[k, v] for k, v in sorted(doc.items())])


@main.command("getSyncStateSet")
@_admin_options
@click.option("-a", "--controllerAddress", "controller", required=True)
@click.option("-b", "--brokerName", "broker_names", required=True, help="broker name(s), comma separated")
def get_sync_state_set(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool,
                       controller: str, broker_names: str) -> None:
    """Master, epochs and in-sync replicas of broker groups (controller mode)."""

    async def go() -> dict[str, Any]:
        async with _admin(namesrv, access_key, secret_key) as a:
            return await a.sync_state_data(controller, [b for b in broker_names.split(",") if b])

    doc = _run(go)
    rows = []
    for name, info in sorted(doc.items()):
        for r in (info or {}).get("inSyncReplicas") or []:
            rows.append([name, info.get("masterBrokerId"), info.get("masterEpoch"), r.get("brokerId"),
                         r.get("brokerAddress"), r.get("alive")])
    _emit(as_json, doc, ["#Broker Name", "#Master Id", "#Master Epoch", "#In-sync Id", "#Address", "#Alive"], rows)


@main.command("electMaster")
@_admin_options
@click.option("-a", "--controllerAddress", "controller", required=True)
@click.option("-c", "--clusterName", "cluster", required=True)
@click.option("-b", "--brokerName", "broker_name", required=True)
@click.option("-i", "--brokerId", "broker_id", type=int, required=True)
def elect_master(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool, controller: str,
                 cluster: str, broker_name: str, broker_id: int) -> None:
    """Make an in-sync replica the master (controller mode)."""

    async def go() -> dict[str, str]:
        async with _admin(namesrv, access_key, secret_key) as a:
            return await a.elect_master(controller, cluster, broker_name, broker_id)

    doc = _run(go)
    _emit(as_json, doc, ["key", "value"], [[k, v] for k, v in sorted(doc.items())])


# ---------------------------------------------------------------------------------------------- ACL 1.0


def _acl_command(f: Any) -> Any:
    f = click.option("-c", "--clusterName", "cluster", default=None)(f)
    f = click.option("-b", "--brokerAddr", "broker", default=None)(f)
    return _admin_options(f)


async def _acl_invoke(a: Admin, cluster: str | None, broker: str | None, code: int, ext: dict[str, str],
                      what: str) -> list[str]:
    addrs = [broker] if broker else (await a.cluster_info()).master_addrs(cluster)
    for addr in addrs:
        await a.instance.invoke(addr, code, ext, what=what)
    return addrs


@main.command("updateAclConfig")
@_acl_command
@click.option("-a", "--accessKey", "ak", required=True)
@click.option("-s", "--secretKey", "sk", default=None)
@click.option("-w", "--whiteRemoteAddress", "white", default=None)
@click.option("-i", "--defaultTopicPerm", "topic_perm", default=None, help="DENY, PUB, SUB or PUB|SUB")
@click.option("-u", "--defaultGroupPerm", "group_perm", default=None)
@click.option("-t", "--topicPerms", "topic_perms", default=None, help="topicA=DENY,topicB=PUB|SUB")
@click.option("-g", "--groupPerms", "group_perms", default=None)
@click.option("-m", "--admin", "is_admin", type=bool, default=None)
def update_acl_config(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool,
                      broker: str | None, cluster: str | None, ak: str, sk: str | None, white: str | None,
                      topic_perm: str | None, group_perm: str | None, topic_perms: str | None,
                      group_perms: str | None, is_admin: bool | None) -> None:
    """Create or update an ACL account on brokers."""
    _where(cluster, broker)
    ext = {"accessKey": ak}
    for key, value in (("secretKey", sk), ("whiteRemoteAddress", white), ("defaultTopicPerm", topic_perm),
                       ("defaultGroupPerm", group_perm), ("topicPerms", topic_perms), ("groupPerms", group_perms),
                       ("admin", None if is_admin is None else str(is_admin).lower())):
        if value is not None:
            ext[key] = value

    async def go() -> list[str]:
        async with _admin(namesrv, access_key, secret_key) as a:
            return await _acl_invoke(a, cluster, broker, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, ext,
                                     f"updateAclConfig {ak}")

    addrs = _run(go)
    _done(as_json, {"accessKey": ak, "brokerAddrs": addrs}, f"create or update plain access config to {addrs} success.")


@main.command("deleteAclConfig")
@_acl_command
@click.option("-a", "--accessKey", "ak", required=True)
def delete_acl_config(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool,
                      broker: str | None, cluster: str | None, ak: str) -> None:
    """Delete an ACL account on brokers."""
    _where(cluster, broker)

    async def go() -> list[str]:
        async with _admin(namesrv, access_key, secret_key) as a:
            return await _acl_invoke(a, cluster, broker, RequestCode.DELETE_ACL_CONFIG, {"accessKey": ak},
                                     f"deleteAclConfig {ak}")

    addrs = _run(go)
    _done(as_json, {"accessKey": ak, "brokerAddrs": addrs}, f"delete plain access config from {addrs} success.")


@main.command("updateGlobalWhiteAddr")
@_acl_command
@click.option("-g", "--globalWhiteRemoteAddresses", "whites", required=True, help="comma separated patterns")
def update_global_white_addr(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool,
                             broker: str | None, cluster: str | None, whites: str) -> None:
    """Replace the global white list of remote addresses on brokers."""
    _where(cluster, broker)

    async def go() -> list[str]:
        async with _admin(namesrv, access_key, secret_key) as a:
            return await _acl_invoke(a, cluster, broker, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
                                     {"globalWhiteAddrs": whites}, "updateGlobalWhiteAddr")

    addrs = _run(go)
    _done(as_json, {"globalWhiteAddrs": whites.split(","), "brokerAddrs": addrs},
          f"update global white remote addresses to {addrs} success.")


@main.command("clusterAclConfigVersion")
@_acl_command
def cluster_acl_config_version(namesrv: str, access_key: str | None, secret_key: str | None, as_json: bool,
                               broker: str | None, cluster: str | None) -> None:
    """The ACL file version of each broker."""
    _where(cluster, broker)

    async def go() -> list[dict[str, Any]]:
        async with _admin(namesrv, access_key, secret_key) as a:
            addrs = [broker] if broker else (await a.cluster_info()).master_addrs(cluster)
            out = []
            for addr in addrs:
                r = await a.instance.invoke(addr, RequestCode.GET_BROKER_CLUSTER_ACL_INFO, {}, what="acl version")
                out.append({"brokerAddr": addr, **dict(r.ext)})
            return out

    rows = _run(go)
    _emit(as_json, rows, ["#Broker Addr", "#Broker Name", "#Version"],
          [[r["brokerAddr"], r.get("brokerName", ""), r.get("version", r.get("allAclFileVersion", ""))] for r in rows])
