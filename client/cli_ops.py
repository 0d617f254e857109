"""``rmqadmin`` commands beyond the basics: group offsets and members, message browsing and
re-delivery (DLQ included), store maintenance and the name server's configuration.

Registered on ``rmq.client.cli.main`` through its command table (:func:`rmq.client.cli.command`);
names and flags are mqadmin's.
"""

from __future__ import annotations

from typing import Any

import anyio
import click

from rmq.client import Admin, ClientError, Message, PullConsumer, PullStatus
from rmq.client.cli import (
    BOOL,
    BROKER,
    CLIENT_ID,
    CONSUMER_GROUP,
    CONTROLLER,
    GROUP,
    GROUP_NAME,
    KEY,
    NAMESPACE,
    TARGETS,
    TO_BROKER,
    TOPIC,
    VALUE,
    Shown,
    Tools,
    _done,
    _fields,
    _invoke_all,
    _message_doc,
    _messages,
    _offsets,
    _settings,
    _timestamp,
    command,
    human_time,
    show_message,
    version_desc,
)
from rmq.kernel.model import MessageQueue
from rmq.protocol.codes import RequestCode

_SKIP_PROPS = {"MIN_OFFSET", "MAX_OFFSET", "UNIQ_KEY", "CLUSTER", "REAL_TOPIC", "REAL_QID", "RETRY_TOPIC",
               "ORIGIN_MESSAGE_ID", "RECONSUME_TIME", "MAX_RECONSUME_TIMES", "DELAY", "WAIT", "TRAN_MSG"}
_MEMBERS = ["#ClientId", "#ClientAddr", "#Language", "#Version"]


def _members(doc: dict[str, Any], *lines: str) -> Shown:
    """A group's connections (GET_*_CONNECTION_LIST), one row a member."""
    conns = doc.get("connectionSet") or []
    return Shown(doc, _MEMBERS, [[c.get("clientId"), c.get("clientAddr"), c.get("language"), version_desc(c.get("version"))]
                                 for c in conns], list(lines))


# ---------------------------------------------------------------------------------------------- topics


@command("topicClusterList", TOPIC)
async def topic_cluster_list(t: Tools, topic: str) -> Shown:
    """The clusters a topic lives in."""
    async with t.admin() as a:
        route = await a.topic_route(topic)
    clusters = sorted({bd.cluster for bd in route.broker_datas})
    return Shown({"topic": topic, "clusterList": clusters}, lines=clusters)


@command("updateTopicPerm", TOPIC, *TARGETS,
         click.option("-p", "--perm", type=click.Choice(["2", "4", "6"]), required=True, help="2 write, 4 read, 6 both"),
         where=True)
async def update_topic_perm(t: Tools, topic: str, broker: str | None, cluster: str | None, perm: str) -> Shown:
    """Change a topic's permission where it exists, keeping its other settings."""
    async with t.admin() as a:
        addrs = await a.masters(cluster, broker)
        for addr in addrs:
            tc = await a.topic_config(addr, topic)
            ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(tc["readQueueNums"]),
                   "writeQueueNums": str(tc["writeQueueNums"]), "perm": perm,
                   "topicFilterType": tc.get("topicFilterType", "SINGLE_TAG"),
                   "topicSysFlag": str(tc.get("topicSysFlag", 0)), "order": str(tc.get("order", False)).lower()}
            await a.instance.invoke(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, ext, what=f"updateTopicPerm {topic}")
    return _done({"topic": topic, "perm": int(perm), "brokerAddrs": addrs},
                 f"update topic perm from {', '.join(addrs)} to {perm} success.")


# ---------------------------------------------------------------------------------------------- groups


@command("deleteSubGroup", GROUP_NAME, *TARGETS,
         click.option("-r", "--removeOffset", "remove_offset", type=bool, default=False, show_default=True),
         where=True)
async def delete_sub_group(t: Tools, group: str, broker: str | None, cluster: str | None, remove_offset: bool) -> Shown:
    """Delete a subscription group (and its offsets with -r true)."""
    async with t.admin() as a:
        addrs = await _invoke_all(a, await a.masters(cluster, broker), RequestCode.DELETE_SUBSCRIPTIONGROUP,
                                  {"groupName": group, "removeOffset": str(remove_offset).lower()},
                                  what=f"deleteSubGroup {group}")
    return _done({"groupName": group, "brokerAddrs": addrs},
                 f"delete subscription group [{group}] from {', '.join(addrs)} success.")


@command("consumerConnection", CONSUMER_GROUP, TO_BROKER)
async def consumer_connection(t: Tools, group: str, broker: str | None) -> Shown:
    """A group's connected members and subscriptions."""
    async with t.admin() as a:
        doc = await a.consumer_connection(group, broker)
    subs = [f"{topic}  {sub.get('subString', '*')}" for topic, sub in sorted((doc.get("subscriptionTable") or {}).items())]
    return _members(doc, *subs, f"ConsumeType: {doc.get('consumeType')}  MessageModel: {doc.get('messageModel')}  "
                                f"ConsumeFromWhere: {doc.get('consumeFromWhere')}")


@command("producerConnection", click.option("-g", "--producerGroup", "group", required=True), TOPIC)
async def producer_connection(t: Tools, group: str, topic: str) -> Shown:
    """A producer group's connections (on the brokers of a topic)."""
    async with t.admin() as a:
        return _members(await a.producer_connection(group, topic))


@command("consumerStatus", CONSUMER_GROUP,
         click.option("-i", "--clientId", "client_id", default=None, help="one member (default: every member)"),
         click.option("-b", "--brokerAddr", "broker", default=None, help="the broker to ask for the members"),
         click.option("-s", "--jstack", "jstack", is_flag=True, help="with each member's thread stacks"))
async def consumer_status(t: Tools, group: str, client_id: str | None, broker: str | None, jstack: bool) -> Shown:
    """Each member's running info (GET_CONSUMER_RUNNING_INFO through its broker)."""
    async with t.admin() as a:
        ids = [client_id] if client_id else [c["clientId"] for c in
                                             (await a.consumer_connection(group, broker)).get("connectionSet") or []]
        doc = {cid: await a.consumer_running_info(group, cid, jstack) for cid in ids}
    rows = []
    for cid, info in doc.items():
        props = info.get("properties") or {}
        rows.append([cid, props.get("consumeType", ""), props.get("messageModel", ""),
                     ", ".join(s.get("topic", "") for s in info.get("subscriptionSet") or [])])
    return Shown(doc, ["#ClientId", "#ConsumeType", "#MessageModel", "#Topics"], rows)


@command("getConsumerStatus", GROUP, TOPIC, click.option("-i", "--originClientId", "client_id", default=""))
async def get_consumer_status(t: Tools, group: str, topic: str, client_id: str) -> Shown:
    """The offsets each member holds on a topic (INVOKE_BROKER_TO_GET_CONSUMER_STATUS)."""
    async with t.admin() as a:
        status = await a.consumer_status(group, topic, client_id)
    rows = [[cid, mq.broker_name, mq.queue_id, off] for cid, table in status.items()
            for mq, off in sorted(table.items(), key=lambda kv: (kv[0].broker_name, kv[0].queue_id))]
    doc = {cid: [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off} for mq, off in table.items()]
           for cid, table in status.items()}
    return Shown(doc, ["#ClientId", "#Broker Name", "#QID", "#Offset"], rows)


@command("cloneGroupOffset", click.option("-s", "--srcGroup", "src", required=True),
         click.option("-d", "--destGroup", "dest", required=True), TOPIC,
         click.option("-o", "--offline", type=bool, default=False, show_default=True))
async def clone_group_offset(t: Tools, src: str, dest: str, topic: str, offline: bool) -> Shown:
    """Copy one group's offsets to another."""
    async with t.admin() as a:
        addrs = await a.clone_group_offset(src, dest, topic, offline)
    return _done({"srcGroup": src, "destGroup": dest, "topic": topic, "brokerAddrs": addrs},
                 f"clone group offset success. srcGroup[{src}], destGroup[{dest}], topic[{topic or ''}]")


@command("skipAccumulatedMessage", GROUP, TOPIC, click.option("-f", "--force", type=bool, default=True, show_default=True))
async def skip_accumulated(t: Tools, group: str, topic: str, force: bool) -> Shown:
    """Move a group to the end of every queue (online members are told)."""
    async with t.admin() as a:
        return _offsets(await a.reset_offset_by_timestamp(group, topic, -1, force=force))


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


@command("printMsg", click.option("-t", "--topic", required=True,
                                  help="any topic, %DLQ%<group> to browse a dead-letter queue"),
         click.option("-c", "--charsetName", "charset", default="UTF-8", show_default=True, help="the bodies' charset"),
         click.option("-s", "--subExpression", "expression", default="*", show_default=True),
         click.option("-b", "--beginTimestamp", "begin", default=None, help="epoch ms or yyyy-MM-dd#HH:mm:ss:SSS"),
         click.option("-e", "--endTimestamp", "end", default=None),
         click.option("-d", "--printBody", "print_body", type=BOOL, default=True, show_default=True),
         click.option("-l", "--limit", type=int, default=1000, show_default=True))
async def print_msg(t: Tools, topic: str, charset: str, expression: str, begin: str | None, end: str | None,
                    print_body: bool, limit: int) -> Shown:
    """Print a topic's messages (commits nothing)."""
    async with t.consumer() as pc:
        messages = await _pull_range(pc, topic, _timestamp(begin) if begin else None,
                                     _timestamp(end) if end else None, limit, expression)
    return _messages(messages, ["#QID", "#Offset", "#MsgId", "#Tags", "#Keys", "#Body"],
                     ["queueId", "queueOffset", "msgId", "tags", "keys", "body"], charset, print_body)


@command("queryMsgByOffset", TOPIC, click.option("-b", "--brokerName", "broker_name", required=True),
         click.option("-i", "--queueId", "queue_id", type=int, required=True),
         click.option("-o", "--offset", type=int, required=True))
async def query_msg_by_offset(t: Tools, topic: str, broker_name: str, queue_id: int, offset: int) -> Shown:
    """The message at a queue offset."""
    async with t.consumer() as pc:
        await pc.fetch_queues(topic)
        r = await pc.pull(MessageQueue(topic, broker_name, queue_id), offset, 1)
    if r.status is not PullStatus.FOUND or not r.messages:
        raise ClientError(f"no message at {topic}/{broker_name}/{queue_id}/{offset}: {r.status.name}")
    return _fields(_message_doc(r.messages[0]))


@command("queryMsgByUniqueKey", click.option("-i", "--msgId", "msg_id", required=True, help="the client msgId (UNIQ_KEY)"),
         TOPIC, click.option("-g", "--consumerGroup", "group", default=None, help="with -d: give it to that member's listener"),
         CLIENT_ID, click.option("-a", "--showAll", "show_all", is_flag=True,
                                 help="every message stored with the key (a retried send stores it again), up to 32"))
async def query_msg_by_unique_key(t: Tools, msg_id: str, topic: str, group: str | None, client_id: str | None,
                                  show_all: bool) -> Shown:
    """A message by its unique key; with -g and -d, consumed directly by that member."""
    if show_all and not (group and client_id):
        async with t.admin() as a:
            docs = [_message_doc(m) for m in (await a.query_message(topic, msg_id, unique_key=True))[:32]]
        return Shown(docs, ["#Message ID", "#QID", "#Offset", "#Store Host"],
                     [[d["offsetMsgId"], d["queueId"], d["queueOffset"], d["storeHost"]] for d in docs])
    return await show_message(t, msg_id, topic, group, client_id)


@command("resendMessageToGroup", click.option("-i", "--msgId", "msg_id", required=True,
                                              help="offset msgId (as printMsg shows)"), CONSUMER_GROUP,
         click.option("-d", "--clientId", "client_id", default=None, help="consume directly by this member instead"))
async def resend_message_to_group(t: Tools, msg_id: str, group: str, client_id: str | None) -> Shown:
    """Deliver a stored message (a DLQ one included) to a consumer group again: sent to the group's
    retry topic, so only that group sees it; with -d, handed to one member's listener at once."""
    async with t.admin() as a:
        m = await a.view_message(msg_id)
        if client_id:
            return _fields(await a.consume_message_directly(group, client_id, msg_id, m.topic))
        props = {k: v for k, v in m.properties.items() if k not in _SKIP_PROPS and k not in ("TAGS", "KEYS")}
        props.setdefault("RETRY_TOPIC", m.properties.get("RETRY_TOPIC") or m.properties.get("REAL_TOPIC") or m.topic)
        async with t.producer("TOOLS_RESEND") as p:
            r = await p.send(Message(f"%RETRY%{group}", m.body, tags=m.tags, keys=m.keys, properties=props))
    return _fields({"msgId": r.msg_id, "offsetMsgId": r.offset_msg_id, "topic": f"%RETRY%{group}",
                    "sendStatus": r.status.value})


# ---------------------------------------------------------------------------------------------- brokers


def _maintenance(name: str, code: int, line: str, doc: str) -> None:
    """Register a store-maintenance command: one request on the chosen brokers."""

    async def body(t: Tools, broker: str | None, cluster: str | None) -> Shown:
        async with t.admin() as a:
            addrs = await a.broker_maintenance(code, cluster, broker)
        return _done({"brokerAddrs": addrs, "success": True}, f"{line} {', '.join(addrs)} success")

    command(name, TO_BROKER, click.option("-c", "--cluster", "cluster", default=None), where=True, doc=doc)(body)


_maintenance("cleanExpiredCQ", RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, "clean expired consume queues on",
             "Drop consume queues whose messages all expired.")
_maintenance("deleteExpiredCommitLog", RequestCode.DELETE_EXPIRED_COMMITLOG, "delete expired commitlog on",
             "Delete expired commitlog files now, whatever deleteWhen says.")
_maintenance("cleanUnusedTopic", RequestCode.CLEAN_UNUSED_TOPIC, "clean unused topics on",
             "Forget the store's queues of topics the broker no longer has.")


@command("brokerConsumeStats", BROKER,
         click.option("-t", "--timeoutMillis", "timeout_ms", type=int, default=50000, show_default=True),
         click.option("-l", "--level", type=int, default=0, show_default=True, help="only queues lagging at least this"),
         click.option("-o", "--order", type=bool, default=False, show_default=True))
async def broker_consume_stats(t: Tools, broker: str, timeout_ms: int, level: int, order: bool) -> Shown:
    """Every group's progress on one broker (GET_BROKER_CONSUME_STATS)."""
    with anyio.fail_after(timeout_ms / 1000):
        async with t.admin() as a:
            doc = await a.broker_consume_stats(broker, order)
    rows = [{"topic": mq.topic, "consumerGroup": g, "brokerName": mq.broker_name, "queueId": mq.queue_id,
             "brokerOffset": w.get("brokerOffset", 0), "consumerOffset": w.get("consumerOffset", 0),
             "diff": w.get("brokerOffset", 0) - w.get("consumerOffset", 0), "lastTimestamp": w.get("lastTimestamp", 0)}
            for g, table in sorted(doc["groups"].items())
            for mq, w in sorted(table.items(), key=lambda kv: (kv[0].topic, kv[0].queue_id))]
    rows = [r for r in rows if r["diff"] >= level]
    return Shown({"brokerAddr": broker, "totalDiff": doc["totalDiff"], "offsetTable": rows},
                 ["#Topic", "#Group", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff", "#LastTime"],
                 [[*list(r.values())[:-1], human_time(r["lastTimestamp"])[:19] or "N/A"] for r in rows],
                 [f"Diff Total: {doc['totalDiff']}"])


@command("statsAll", click.option("-t", "--topic", default=None, help="one topic (default: every topic)"),
         click.option("-a", "--activeTopic", "active", is_flag=True, help="only topics with traffic"))
async def stats_all(t: Tools, topic: str | None, active: bool) -> Shown:
    """Put and get rates per topic and group over the last minute (VIEW_BROKER_STATS_DATA)."""
    rows = []
    async with t.admin() as a:
        topics = [topic] if topic else [n for n in await a.list_topics() if not n.startswith(("%", "rmq_sys"))]
        for name in topics:
            try:
                route = await a.topic_route(name)
            except ClientError:
                continue
            groups = await a.topic_consumed_by(name)
            for bd in route.broker_datas:
                addr = bd.master_addr
                if addr is None:
                    continue
                put = await _stats(a, addr, "TOPIC_PUT_NUMS", name)
                for g in groups or [""]:
                    got = await _stats(a, addr, "GROUP_GET_NUMS", f"{name}@{g}") if g else None
                    lag = sum(p.lag for p in await a.consumer_progress(g, name)) if g else 0
                    rows.append({"topic": name, "broker": bd.broker_name, "consumerGroup": g, "accumulation": lag,
                                 "inTps": put["statsMinute"]["tps"] if put else 0.0,
                                 "outTps": got["statsMinute"]["tps"] if got else 0.0,
                                 "inMsg24Hour": put["statsDay"]["sum"] if put else 0,
                                 "outMsg24Hour": got["statsDay"]["sum"] if got else 0})
    if active:
        rows = [r for r in rows if r["inMsg24Hour"] or r["outMsg24Hour"]]
    cols = ["topic", "consumerGroup", "accumulation", "inTps", "outTps", "inMsg24Hour", "outMsg24Hour"]
    return Shown(rows, ["#Topic", "#Consumer Group", "#Accumulation", "#InTPS", "#OutTPS", "#InMsg24Hour",
                        "#OutMsg24Hour"], [[r[c] for c in cols] for r in rows])


async def _stats(a: Admin, addr: str, name: str, key: str) -> dict[str, Any] | None:
    try:
        return await a.view_broker_stats(addr, name, key)
    except ClientError:
        return None


# ---------------------------------------------------------------------------------------------- name servers


@command("getNamesrvConfig")
async def get_namesrv_config(t: Tools) -> Shown:
    """Every name server's configuration."""
    async with t.admin() as a:
        doc = await a.namesrv_config()
    return Shown(doc, ["#Namesrv", "key", "value"],
                 [[addr, k, v] for addr, cfg in doc.items() for k, v in sorted(cfg.items())])


@command("updateNamesrvConfig", KEY, VALUE)
async def update_namesrv_config(t: Tools, key: str, value: str) -> Shown:
    """Change a running name server's setting (start-only settings are refused)."""
    async with t.admin() as a:
        addrs = await a.update_namesrv_config(key, value)
    return _done({"key": key, "value": value, "namesrvAddrs": addrs},
                 f"update name server config success!{addrs}\n{key} : {value}")


@command("updateKvConfig", NAMESPACE, KEY, VALUE)
async def update_kv_config(t: Tools, namespace: str, key: str, value: str) -> Shown:
    """Set a KV config item on every name server (e.g. ORDER_TOPIC_CONFIG)."""
    async with t.admin() as a:
        await a.put_kv_config(namespace, key, value)
    return _done({"namespace": namespace, "key": key, "value": value}, "create or update kv config to namespace success.")


@command("deleteKvConfig", NAMESPACE, KEY)
async def delete_kv_config(t: Tools, namespace: str, key: str) -> Shown:
    """Delete a KV config item on every name server."""
    async with t.admin() as a:
        await a.delete_kv_config(namespace, key)
    return _done({"namespace": namespace, "key": key, "deleted": True}, "delete kv config from namespace success.")


def _write_perm(name: str, code: int, count_key: str, verb: str, doc: str) -> None:
    """Register wipeWritePerm / addWritePerm: the name servers change a broker's write permission."""

    async def body(t: Tools, broker_name: str) -> Shown:
        lines, counts = [], {}
        async with t.admin() as a:
            for addr in a.instance.namesrv_addrs:
                try:
                    r = await a.instance.invoke(addr, code, {"brokerName": broker_name}, what=name)
                    counts[addr] = int(r.ext.get(count_key) or 0)
                    lines.append(f"{verb} write perm of broker[{broker_name}] in name server[{addr}] OK, {counts[addr]}")
                except ClientError:
                    counts[addr] = -1
                    lines.append(f"{verb} write perm of broker[{broker_name}] in name server[{addr}] Failed")
        return Shown({"brokerName": broker_name, count_key: counts}, lines=lines)

    command(name, click.option("-b", "--brokerName", "broker_name", required=True), doc=doc)(body)


_write_perm("wipeWritePerm", RequestCode.WIPE_WRITE_PERM_OF_BROKER, "wipeTopicCount", "wipe",
            "Take write permission from a broker's topics on every name server (drain it before a stop).")
_write_perm("addWritePerm", RequestCode.ADD_WRITE_PERM_OF_BROKER, "addTopicCount", "add",
            "Give a broker's topics write permission back on every name server.")


@command("updateOrderConf", TOPIC, click.option("-m", "--method", required=True, type=click.Choice(["put", "get", "delete"])),
         click.option("-v", "--orderConf", "conf", default="", help="brokerName1:num;brokerName2:num"))
async def update_order_conf(t: Tools, topic: str, method: str, conf: str) -> Shown:
    """A topic's order configuration on the name servers (KV namespace ORDER_TOPIC_CONFIG)."""
    async with t.admin() as a:
        if method == "get":
            r = await a.instance.invoke_namesrv(RequestCode.GET_KV_CONFIG,
                                                {"namespace": "ORDER_TOPIC_CONFIG", "key": topic})
            if r.code != 0:
                raise ClientError(f"CODE: {r.code} DESC: {r.remark}")
            value = r.ext.get("value", "")
            return _done({"topic": topic, "orderConf": value},
                         f"get orderConf success. topic=[{topic}], orderConf=[{value}] ")
        if method == "put":
            if not conf.strip():
                raise click.UsageError("please set orderConf with option -v.")
            await a.put_kv_config("ORDER_TOPIC_CONFIG", topic, conf.strip())
            return _done({"topic": topic, "orderConf": conf.strip()},
                         f"update orderConf success. topic=[{topic}], orderConf=[{conf.strip()}]")
        await a.delete_kv_config("ORDER_TOPIC_CONFIG", topic)
    return _done({"topic": topic, "deleted": True}, f"delete orderConf success. topic=[{topic}]")


@command("getConsumerConfig", click.option("-g", "--groupName", "group", required=True))
async def get_consumer_config(t: Tools, group: str) -> Shown:
    """A subscription group's settings on every master that has it, as mqadmin lists them."""
    docs: dict[str, dict[str, Any]] = {}
    async with t.admin() as a:
        for cluster, name, bid, addr in (await a.cluster_info()).members():
            if bid != 0:
                continue
            try:
                cfg = await a.group_config(addr, group)
            except ClientError:
                continue
            if cfg:
                docs[f"{cluster}:{name}"] = cfg
    lines = []
    for where, cfg in docs.items():
        lines.append(f"{'=' * 29}{where}{'=' * 29}")
        lines += [f"{k:<40}=  {str(v).lower() if isinstance(v, bool) else v}" for k, v in cfg.items()]
    return Shown(docs, lines=lines)


@command("queryCq", TOPIC, click.option("-q", "--queue", "queue_id", type=int, required=True),
         click.option("-i", "--index", type=int, required=True), click.option("-c", "--count", type=int, default=10,
                                                                              show_default=True),
         click.option("-b", "--broker", "broker", default=None, help="broker address (default: the topic's first)"),
         click.option("-g", "--consumer", "group", default=None, help="with the group's filter evaluated"))
async def query_cq(t: Tools, topic: str, queue_id: int, index: int, count: int, broker: str | None,
                   group: str | None) -> Shown:
    """Raw consume queue entries (QUERY_CONSUME_QUEUE)."""
    async with t.admin() as a:
        addr = broker or (await a.topic_route(topic)).broker_datas[0].master_addr
        doc = await a.query_consume_queue(addr, topic, queue_id, index, count, group)
    rows = [[index + i, q.get("physicOffset"), q.get("physicSize"), q.get("tagsCode")]
            for i, q in enumerate(doc.get("queueData") or [])]
    return Shown(doc, ["#Index", "#PhysicOffset", "#PhysicSize", "#TagsCode"], rows,
                 [f"max: {doc.get('maxQueueIndex')}, min: {doc.get('minQueueIndex')}"])


# ---------------------------------------------------------------------------------------------- HA and controller

_HA_KEYS = ("brokerRole", "haConnectionCount", "slaveAckOffset", "slaveFallBehindMuch", "haSlaves",
            "commitLogMaxOffset", "masterAddr", "masterConnected")


@command("haStatus", *TARGETS, where=True)
async def ha_status(t: Tools, broker: str | None, cluster: str | None) -> Shown:
    """Replication state of masters: role, connected slaves, how far each is behind."""
    doc = {}
    async with t.admin() as a:
        for addr in await a.masters(cluster, broker):
            rt = await a.broker_runtime_info(addr)
            doc[addr] = {k: rt[k] for k in _HA_KEYS if k in rt}
    return Shown(doc, ["#Broker", "key", "value"], [[addr, k, v] for addr, kv in doc.items() for k, v in kv.items()])


@command("getControllerMetaData", CONTROLLER)
async def get_controller_metadata(t: Tools, controller: str) -> Shown:
    """The controller group: leader, peers."""
    async with t.admin() as a:
        return _settings(await a.controller_metadata(controller))


@command("getSyncStateSet", CONTROLLER,
         click.option("-b", "--brokerName", "broker_names", required=True, help="broker name(s), comma separated"))
async def get_sync_state_set(t: Tools, controller: str, broker_names: str) -> Shown:
    """Master, epochs and in-sync replicas of broker groups (controller mode)."""
    async with t.admin() as a:
        doc = await a.sync_state_data(controller, [b for b in broker_names.split(",") if b])
    rows = []
    for name, info in sorted(doc.items()):
        for r in (info or {}).get("inSyncReplicas") or []:
            rows.append([name, info.get("masterBrokerId"), info.get("masterEpoch"), r.get("brokerId"),
                         r.get("brokerAddress"), r.get("alive")])
    return Shown(doc, ["#Broker Name", "#Master Id", "#Master Epoch", "#In-sync Id", "#Address", "#Alive"], rows)


@command("electMaster", CONTROLLER, click.option("-c", "--clusterName", "cluster", required=True),
         click.option("-bn", "--brokerName", "broker_name", required=True),
         click.option("-b", "--brokerId", "broker_id", type=int, required=True))
async def elect_master(t: Tools, controller: str, cluster: str, broker_name: str, broker_id: int) -> Shown:
    """Make an in-sync replica the master (controller mode)."""
    async with t.admin() as a:
        return _settings(await a.elect_master(controller, cluster, broker_name, broker_id))


# ---------------------------------------------------------------------------------------------- ACL 1.0


async def _acl_invoke(t: Tools, cluster: str | None, broker: str | None, code: int, ext: dict[str, str],
                      what: str) -> list[str]:
    async with t.admin() as a:
        return await _invoke_all(a, await a.masters(cluster, broker), code, ext, what=what)


@command("updateAclConfig", *TARGETS, click.option("-a", "--accessKey", "ak", required=True),
         click.option("-s", "--secretKey", "sk", required=True),
         click.option("-w", "--whiteRemoteAddress", "white", default=None),
         click.option("-i", "--defaultTopicPerm", "topic_perm", default=None, help="DENY, PUB, SUB or PUB|SUB"),
         click.option("-u", "--defaultGroupPerm", "group_perm", default=None),
         click.option("-t", "--topicPerms", "topic_perms", default=None, help="topicA=DENY,topicB=PUB|SUB"),
         click.option("-g", "--groupPerms", "group_perms", default=None),
         click.option("-m", "--admin", "is_admin", type=bool, default=None), where=True)
async def update_acl_config(t: Tools, broker: str | None, cluster: str | None, ak: str, sk: str,
                            white: str | None, topic_perm: str | None, group_perm: str | None,
                            topic_perms: str | None, group_perms: str | None, is_admin: bool | None) -> Shown:
    """Create or update an ACL account on brokers."""
    ext = {"accessKey": ak}
    for key, value in (("secretKey", sk), ("whiteRemoteAddress", white), ("defaultTopicPerm", topic_perm),
                       ("defaultGroupPerm", group_perm), ("topicPerms", topic_perms), ("groupPerms", group_perms),
                       ("admin", None if is_admin is None else str(is_admin).lower())):
        if value is not None:
            ext[key] = value
    addrs = await _acl_invoke(t, cluster, broker, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, ext, f"updateAclConfig {ak}")
    return _done({"accessKey": ak, "brokerAddrs": addrs}, f"create or update plain access config to {addrs} success.")


@command("deleteAclConfig", *TARGETS, click.option("-a", "--accessKey", "ak", required=True), where=True)
async def delete_acl_config(t: Tools, broker: str | None, cluster: str | None, ak: str) -> Shown:
    """Delete an ACL account on brokers."""
    addrs = await _acl_invoke(t, cluster, broker, RequestCode.DELETE_ACL_CONFIG, {"accessKey": ak},
                              f"deleteAclConfig {ak}")
    return _done({"accessKey": ak, "brokerAddrs": addrs}, f"delete plain access config from {addrs} success.")


@command("updateGlobalWhiteAddr", *TARGETS,
         click.option("-g", "--globalWhiteRemoteAddresses", "whites", required=True, help="comma separated patterns"),
         where=True)
async def update_global_white_addr(t: Tools, broker: str | None, cluster: str | None, whites: str) -> Shown:
    """Replace the global white list of remote addresses on brokers."""
    addrs = await _acl_invoke(t, cluster, broker, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
                              {"globalWhiteAddrs": whites}, "updateGlobalWhiteAddr")
    return _done({"globalWhiteAddrs": whites.split(","), "brokerAddrs": addrs},
                 f"update global white remote addresses to {addrs} success.")


@command("clusterAclConfigVersion", *TARGETS, where=True)
async def cluster_acl_config_version(t: Tools, broker: str | None, cluster: str | None) -> Shown:
    """The ACL file version of each broker."""
    rows = []
    async with t.admin() as a:
        for addr in await a.masters(cluster, broker):
            r = await a.instance.invoke(addr, RequestCode.GET_BROKER_CLUSTER_ACL_INFO, {}, what="acl version")
            rows.append({"brokerAddr": addr, **dict(r.ext)})
    return Shown(rows, ["#Broker Addr", "#Broker Name", "#Version"],
                 [[r["brokerAddr"], r.get("brokerName", ""), r.get("version", r.get("allAclFileVersion", ""))]
                  for r in rows])
