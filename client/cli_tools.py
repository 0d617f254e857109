"""``rmqadmin`` commands of mqadmin's tool box: queue allocation, per-queue browsing, send
probes (sendMsgStatus, checkMsgSendRT, clusterRT), metadata/config/metric exports, a message's
trace, a broker's producers and the monitor (startMonitoring).

Registered on ``rmq.client.cli.main`` through its command table (:func:`rmq.client.cli.command`);
names, flags and printed lines are RocketMQ 4.9.8 mqadmin's. Where mqadmin prints a Java
``HashMap``/``HashSet`` its order is Java's hash order, so :func:`java_order` gives it here too
(same input, same lines, whichever tool printed them).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import click

from rmq.client import Admin, ClientError, Message, PullStatus
from rmq.client.cli import BOOL, TOPIC, Shown, Tools, _message_doc, _timestamp, command, version_desc
from rmq.client.consumer import make_strategy
from rmq.client.instance import client_kernel
from rmq.client.trace import decode_traces
from rmq.kernel.model import MessageQueue
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import DEFAULT_VERSION

T = TypeVar("T")

EXPORT_DIR = "/tmp/rocketmq/export"  # mqadmin's default -f of the export commands
# groups mqadmin's exports leave out (besides CID_RMQ_SYS_*): the clients' and tools' own
_SYSTEM_GROUPS = {"DEFAULT_CONSUMER", "DEFAULT_PRODUCER", "TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "__MONITOR_CONSUMER",
                  "CLIENT_INNER_PRODUCER", "SELF_TEST_P_GROUP", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
                  "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER", "CID_ONSAPI_PULL", "CID_RMQ_SYS_TRANS"}


# ---------------------------------------------------------------------------------------------- Java's orders


def java_hash(s: str) -> int:
    """``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _mq_hash(mq: MessageQueue) -> int:
    """``MessageQueue.hashCode``: broker name, queue id, topic."""
    h = 1
    for part in (java_hash(mq.broker_name), mq.queue_id, java_hash(mq.topic)):
        h = (31 * h + part) & 0xFFFFFFFF
    return h


def java_order(items: Iterable[T], hash_of: Callable[[T], int] = lambda s: java_hash(str(s))) -> list[T]:
    """The iteration order of a default ``java.util.HashMap``/``HashSet`` filled with ``items`` in
    this order: by bucket of the final table (16, doubled past 3/4 full), insertion order within."""
    seq = list(dict.fromkeys(items))
    cap = 16
    while len(seq) > cap * 3 // 4:
        cap *= 2

    def bucket(x: T) -> int:
        h = hash_of(x) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1)

    return sorted(seq, key=bucket)  # stable: insertion order within a bucket


def _subscribe_queues(topic: str, route: Any) -> list[MessageQueue]:
    """The readable queues of a route as a Java client's HashSet holds them."""
    mqs = [MessageQueue(topic, qd.broker_name, i) for qd in route.queue_datas if qd.perm & 4
           for i in range(qd.read_queue_nums)]
    return java_order(mqs, _mq_hash)


def _java_bool(b: bool) -> str:
    return "true" if b else "false"


def _java_map(d: dict[str, Any]) -> str:
    """``HashMap.toString``: ``{k=v, k2=v2}`` in hash order."""
    return "{" + ", ".join(f"{k}={d[k]}" for k in java_order(d)) + "}"


def _host(addr: str) -> str:
    """``InetSocketAddress.toString`` of a resolved address: ``/ip:port``."""
    return f"/{addr}"


def message_text(m: Any, broker_name: str, min_offset: int, max_offset: int) -> str:
    """``MessageExt.toString`` of a pulled message as a 4.9.8 pull consumer holds it (broker name and
    the pull's MIN/MAX_OFFSET properties set by the client)."""
    props = {**dict(m.properties), "MIN_OFFSET": str(min_offset), "MAX_OFFSET": str(max_offset)}
    tx = m.properties.get("UNIQ_KEY") if str(m.properties.get("TRAN_MSG", "")).lower() == "true" else "null"
    body = ", ".join(str(b - 256 if b > 127 else b) for b in m.body)
    inner = (f"Message{{topic='{m.topic}', flag={m.flag}, properties={_java_map(props)}, body=[{body}], "
             f"transactionId='{tx}'}}")
    return (f"MessageExt [brokerName={broker_name}, queueId={m.queue_id}, storeSize={m.store_size}, "
            f"queueOffset={m.queue_offset}, sysFlag={m.sys_flag}, bornTimestamp={m.born_timestamp}, "
            f"bornHost={_host(m.born_host)}, storeTimestamp={m.store_timestamp}, storeHost={_host(m.store_host)}, "
            f"msgId={m.offset_msg_id}, commitLogOffset={m.commit_log_offset}, bodyCRC={m.body_crc}, "
            f"reconsumeTimes={m.reconsume_times}, preparedTransactionOffset={m.prepared_transaction_offset}, "
            f"toString()={inner}]")


# ---------------------------------------------------------------------------------------------- topics


@command("allocateMQ", TOPIC, click.option("-i", "--ipList", "ip_list", required=True,
                                           help="client ids, comma separated"))
async def allocate_mq(t: Tools, topic: str, ip_list: str) -> Shown:
    """How the "average" strategy splits the topic's queues over the given clients (RebalanceResult),
    as a consumer of each would compute it; nothing is changed."""
    ips = ip_list.strip().split(",")
    async with t.admin() as a:
        route = await a.topic_route(topic.strip())
    mqs = _subscribe_queues(topic.strip(), route)
    strategy = make_strategy("averagely", client_kernel(), {})
    result = {ip: [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}
                   for mq in strategy.allocate("aa", ip, mqs, ips)] for ip in java_order(ips)}
    doc = {"result": result}
    return Shown(doc, lines=[json.dumps(doc, separators=(",", ":"))])


# ---------------------------------------------------------------------------------------------- messages


@command("printMsgByQueue", TOPIC,
         click.option("-a", "--brokerName", "broker_name", required=True),
         click.option("-i", "--queueId", "queue_id", type=int, required=True),
         click.option("-c", "--charsetName", "charset", default="UTF-8", show_default=True),
         click.option("-s", "--subExpression", "expression", default="*", show_default=True),
         click.option("-b", "--beginTimestamp", "begin", default=None, help="epoch ms or yyyy-MM-dd#HH:mm:ss:SSS"),
         click.option("-e", "--endTimestamp", "end", default=None),
         # mqadmin's long name is "print msg" (a space: no shell passes it as one option)
         click.option("-p", "--printMsg", "print_msg", type=BOOL, default=False, show_default=True,
                      help="print each message"),
         click.option("-d", "--printBody", "print_body", type=BOOL, default=False, show_default=True),
         click.option("-f", "--calculate", "calculate", type=BOOL, default=False, show_default=True,
                      help="count the messages by tag"))
async def print_msg_by_queue(t: Tools, topic: str, broker_name: str, queue_id: int, charset: str, expression: str,
                             begin: str | None, end: str | None, print_msg: bool, print_body: bool,
                             calculate: bool) -> Shown:
    """One queue's messages from its first offset (or -b's time) to its end (or -e's time): each
    message with -p true, a count per tag with -f true (commits nothing)."""
    mq = MessageQueue(topic.strip(), broker_name.strip(), queue_id)
    lines: list[str] = []
    docs: list[dict[str, Any]] = []
    tags: dict[str, int] = {}
    async with t.consumer() as pc:
        await pc.fetch_queues(mq.topic)
        low, high = await pc.min_offset(mq), await pc.max_offset(mq)
        if begin:
            low = await pc.search_offset(mq, _timestamp(begin.strip()))
        if end:
            high = await pc.search_offset(mq, _timestamp(end.strip()))
        offset = low
        while offset < high:
            r = await pc.pull(mq, offset, 32, expression=expression.strip())
            offset = r.next_begin_offset
            if r.status is not PullStatus.FOUND:
                break  # no match, nothing new, or a bad offset: mqadmin stops reading the queue
            for m in r.messages:
                if m.tags and m.tags.strip():
                    tags[m.tags] = tags.get(m.tags, 0) + 1
                if print_msg:
                    d = _message_doc(m, charset, print_body)
                    docs.append(d)
                    lines.append(f"MSGID: {m.msg_id} {message_text(m, mq.broker_name, r.min_offset, r.max_offset)} "
                                 f"BODY: {d['body']}")
    counted = sorted(java_order(tags), key=lambda k: -tags[k]) if calculate else []  # stable, as Collections.sort
    lines += [f"Tag: {k:<30} Count: {tags[k]}" for k in counted]
    doc: dict[str, Any] = {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": queue_id,
                           "minOffset": low, "maxOffset": high}
    if print_msg:
        doc["messages"] = docs
    if calculate:
        doc["tagCount"] = {k: tags[k] for k in counted}
    return Shown(doc, lines=lines)


@command("queryMsgTraceById", click.option("-i", "--msgId", "msg_id", required=True),
         click.option("-t", "--traceTopic", "trace_topic", default="RMQ_SYS_TRACE_TOPIC", show_default=True))
async def query_msg_trace_by_id(t: Tools, msg_id: str, trace_topic: str) -> Shown:
    """A message's trace: its send (Pub) and each group's consumption (SubAfter), from the trace topic's
    records keyed by the msgId."""
    msg_id = msg_id.strip()
    async with t.admin() as a:
        try:
            found = await a.query_message(trace_topic.strip(), msg_id, max_num=64)
        except ClientError:
            found = []
    views = []
    for m in found:
        for rec in decode_traces(m.body):
            if rec.get("msgId") != msg_id or rec["traceType"] not in ("Pub", "SubAfter"):
                continue
            views.append({"msgType": rec["traceType"], "groupName": rec.get("groupName") or "null",
                          "clientHost": m.born_host.rsplit(":", 1)[0], "timeStamp": int(rec.get("timestamp") or 0),
                          "costTime": int(rec.get("costTime") or 0), "msgId": msg_id, "topic": rec.get("topic"),
                          "tags": rec.get("tags"), "keys": rec.get("keys"), "offSetMsgId": rec.get("offsetMsgId"),
                          "storeHost": rec.get("storeHost"),
                          "status": "success" if rec.get("success", "true").lower() == "true" else "failed"})
    row = "{:<10} {:<20} {:<20} {:<20} {:<10} {:<10}".format

    def when(v: dict[str, Any]) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v["timeStamp"] / 1000))

    lines: list[str] = []
    subs: dict[str, list[dict[str, Any]]] = {}
    for v in views:
        if v["msgType"] == "Pub":
            lines += [row("#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes", "#Status"),
                      row("Pub", str(v["groupName"]), v["clientHost"], when(v), f"{v['costTime']}ms", v["status"]), ""]
        else:
            subs.setdefault(str(v["groupName"]), []).append(v)
    for group in java_order(subs):
        lines.append(row("#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime", "#CostTimes", "#Status"))
        lines += [row("Sub", group, v["clientHost"], when(v), f"{v['costTime']}ms", v["status"]) for v in subs[group]]
        lines.append("")
    return Shown(views, lines=lines)


# ---------------------------------------------------------------------------------------------- send probes


def _send_result_text(r: Any) -> str:
    """``SendResult.toString`` of 4.9.8."""
    return (f"SendResult [sendStatus={r.status.value}, msgId={r.msg_id}, offsetMsgId={r.offset_msg_id}, "
            f"messageQueue={r.queue}, queueOffset={r.queue_offset}]")


def _now_ms() -> int:
    return int(time.time() * 1000)


@command("sendMsgStatus", click.option("-b", "--brokerName", "broker_name", required=True),
         click.option("-s", "--messageSize", "size", type=int, default=128, show_default=True),
         click.option("-c", "--count", type=int, default=50, show_default=True))
async def send_msg_status(t: Tools, broker_name: str, size: int, count: int) -> Shown:
    """Send -c messages of -s bytes to the topic named after the broker (every broker has one), after
    one warm-up send; each send's response time and result."""
    broker_name = broker_name.strip()

    def body(n: int) -> bytes:
        return b"hello jodie" * ((n + 10) // 11)

    rows, lines = [], []
    async with t.producer("PID_SMSC") as p:
        await p.send(Message(broker_name, body(16)))
        for _ in range(count):
            begin = _now_ms()
            r = await p.send(Message(broker_name, body(size)))
            rt = _now_ms() - begin
            rows.append({"rt": rt, "sendStatus": r.status.value, "msgId": r.msg_id, "offsetMsgId": r.offset_msg_id,
                         "brokerName": r.queue.broker_name, "queueId": r.queue.queue_id,
                         "queueOffset": r.queue_offset})
            lines.append(f"rt={rt}ms, SendResult={_send_result_text(r)}")
    return Shown(rows, lines=lines)


def _avg_rt(elapsed: int, amount: int) -> str:
    """mqadmin's average: the sends after the first (a connection's set-up is not an RT); NaN for one."""
    return "NaN" if amount <= 1 else f"{elapsed / (amount - 1):.2f}"


@command("checkMsgSendRT", TOPIC, click.option("-a", "--amount", type=int, default=100, show_default=True),
         click.option("-s", "--size", type=int, default=128, show_default=True, help="message size in bytes"))
async def check_msg_send_rt(t: Tools, topic: str, amount: int, size: int) -> Shown:
    """Send -a messages of -s bytes round the topic's queues (send i to queue i mod n): each send's
    queue, success and RT, then the average RT."""
    topic = topic.strip()
    rows: list[dict[str, Any]] = []
    elapsed = 0
    broker, qid = "", 0  # as mqadmin: a failed send shows the queue of the send before it
    async with t.producer(str(_now_ms())) as p:
        try:
            queues = await p.fetch_publish_queues(topic)
        except ClientError:
            queues = []  # no route: every send fails, as mqadmin's do
        for i in range(amount):
            begin = _now_ms()
            try:
                mq = queues[i % len(queues)]
                broker, qid = mq.broker_name, mq.queue_id
                await p.send(Message(topic, b"a" * size), queue=mq)
                ok = True
            except (ClientError, OSError, ZeroDivisionError):
                ok = False
            rt = _now_ms() - begin
            if i:
                elapsed += rt
            rows.append({"brokerName": broker, "queueId": qid, "sendResult": ok, "rt": rt})
    avg = _avg_rt(elapsed, amount)
    return Shown({"sends": rows, "avgRT": avg}, ["#Broker Name", "#QID", "#Send Result", "#RT"],
                 [[r["brokerName"], r["queueId"], _java_bool(r["sendResult"]), r["rt"]] for r in rows],
                 [f"Avg RT: {avg}"])


@command("clusterRT", click.option("-a", "--amount", type=int, default=100, show_default=True),
         click.option("-s", "--size", type=int, default=128, show_default=True, help="message size in bytes"),
         click.option("-c", "--cluster", default=None, help="default: every cluster"),
         # mqadmin's long names are "print log" and "machine room" (a space: no shell passes them)
         click.option("-p", "--printLog", "print_log", type=BOOL, default=False, show_default=True,
                      help="one line per broker: time|room|cluster|broker|rt"),
         click.option("-m", "--machineRoom", "room", default="noname", show_default=True),
         click.option("-i", "--interval", type=int, default=None,
                      help="seconds between rounds; given, rounds go on until stopped (or --rounds)"),
         click.option("--rounds", type=int, default=None, help="with -i: stop after this many rounds (rmq's)"))
async def cluster_rt(t: Tools, amount: int, size: int, cluster: str | None, print_log: bool, room: str,
                     interval: int | None, rounds: int | None) -> Shown:
    """Send -a messages of -s bytes to each broker of each cluster (to the broker's own topic): mean
    RT (the first send aside), successes and failures per broker. One round; with -i, a round every
    -i seconds until stopped, as mqadmin (--rounds bounds it)."""
    done = 0
    while True:
        shown = await _rt_round(t, amount, size, cluster, print_log, room)
        done += 1
        if not interval or (rounds is not None and done >= rounds):
            return shown
        shown.show(False)
        await anyio.sleep(interval)


async def _rt_round(t: Tools, amount: int, size: int, cluster: str | None, print_log: bool, room: str) -> Shown:
    async with t.admin() as a:
        info = await a.cluster_info()
    names = [cluster.strip()] if cluster else java_order(info.clusters)
    rows: list[dict[str, Any]] = []
    lines: list[str] = []
    async with t.producer(str(_now_ms())) as p:
        for c in names:
            if c not in info.clusters:
                lines.append(f"cluster [{c}] not exist")
                break
            for broker in java_order(info.clusters[c]):
                ok = failed = elapsed = 0
                for i in range(amount):
                    begin = _now_ms()
                    try:
                        await p.send(Message(broker, b"a" * size))
                        ok += 1
                    except (ClientError, OSError):
                        failed += 1
                    if i:
                        elapsed += _now_ms() - begin
                rt = _avg_rt(elapsed, amount)
                rows.append({"clusterName": c, "brokerName": broker, "rt": rt, "successCount": ok, "failCount": failed})
                if print_log:
                    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() + 8 * 3600))  # GMT+8, as mqadmin
                    half_up = "NaN" if rt == "NaN" else str(int(float(rt) + 0.5))
                    lines.append(f"{when}|{room}|{c}|{broker}|{half_up}")
    if print_log:
        return Shown(rows, lines=lines)
    return Shown(rows, ["#Cluster Name", "#Broker Name", "#RT", "#successCount", "#failCount"],
                 [[r["clusterName"], r["brokerName"], r["rt"], r["successCount"], r["failCount"]] for r in rows], lines)


# ---------------------------------------------------------------------------------------------- exports


def _export_dir(path: str) -> Path:
    """-f as a directory to write into: made when missing; anything else (a file, no permission) refused."""
    d = Path(path.strip() or EXPORT_DIR).expanduser()
    if d.exists() and not d.is_dir():
        raise ClientError(f"{d} is not a directory")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ClientError(f"cannot make the export directory {d}: {e.strerror}") from None
    return d


def _write(d: Path, name: str, doc: Any) -> str:
    """``doc`` as pretty JSON in ``d/name`` (only there); the path."""
    target = d / name
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise ClientError(f"{target} is not a regular file")  # a link could point outside -f
    target.write_text(json.dumps(doc, indent="\t", default=str))
    return str(target)


async def _user_topics(a: Admin, addr: str, special: bool) -> dict[str, Any]:
    """GET_ALL_TOPIC_CONFIG less the broker's system topics (and retry/DLQ topics unless ``special``)."""
    doc = await a._doc(addr, RequestCode.GET_ALL_TOPIC_CONFIG, {}, "all topic config") or {}
    system = set(await a.system_topics_of_broker(addr))
    table = doc.get("topicConfigTable") or {}
    doc["topicConfigTable"] = {k: v for k, v in table.items() if k not in system and
                               (special or not k.startswith(("%RETRY%", "%DLQ%")))}
    return doc


async def _user_groups(a: Admin, addr: str) -> dict[str, Any]:
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG less the system groups."""
    doc = await a._doc(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}, "all group config") or {}
    table = doc.get("subscriptionGroupTable") or {}
    doc["subscriptionGroupTable"] = {k: v for k, v in table.items()
                                     if not k.startswith("CID_RMQ_SYS_") and k not in _SYSTEM_GROUPS}
    return doc


@command("exportMetadata", click.option("-c", "--clusterName", "cluster", default=None),
         click.option("-b", "--brokerAddr", "broker", default=None),
         click.option("-f", "--filePath", "path", default=EXPORT_DIR, show_default=True),
         click.option("-t", "--topic", "topics_only", is_flag=True, help="only topics (topic.json)"),
         click.option("-g", "--subscriptionGroup", "groups_only", is_flag=True,
                      help="only subscription groups (subscriptionGroup.json)"),
         click.option("-s", "--specialTopic", "special", is_flag=True, help="retry and DLQ topics too"))
async def export_metadata(t: Tools, cluster: str | None, broker: str | None, path: str, topics_only: bool,
                          groups_only: bool, special: bool) -> Shown:
    """Write the user topics and subscription groups of a broker (-b with -t or -g) or of a cluster's
    masters (-c; queue counts summed over brokers) to metadata.json, topic.json or subscriptionGroup.json."""
    if not broker and not cluster:
        raise click.UsageError("give -c clusterName or -b brokerAddr")
    d = _export_dir(path)
    async with t.admin() as a:
        if broker:
            if topics_only:
                doc, name = await _user_topics(a, broker.strip(), special), "topic.json"
            elif groups_only:
                doc, name = await _user_groups(a, broker.strip()), "subscriptionGroup.json"
            else:
                return Shown({}, lines=[])  # mqadmin: -b without -t or -g writes nothing
            written = _write(d, name, doc)
            return Shown({"path": written}, lines=[f"export {written} success"])
        masters = (await a.cluster_info()).master_addrs(cluster.strip() if cluster else None)
        topics: dict[str, Any] = {}
        groups: dict[str, Any] = {}
        for addr in masters:
            for k, v in ((await _user_topics(a, addr, special)).get("topicConfigTable") or {}).items():
                if k in topics:
                    v["writeQueueNums"] = int(v.get("writeQueueNums", 0)) + int(topics[k].get("writeQueueNums", 0))
                    v["readQueueNums"] = int(v.get("readQueueNums", 0)) + int(topics[k].get("readQueueNums", 0))
                topics[k] = v
            for k, v in ((await _user_groups(a, addr)).get("subscriptionGroupTable") or {}).items():
                if k in groups:
                    v["retryQueueNums"] = int(v.get("retryQueueNums", 0)) + int(groups[k].get("retryQueueNums", 0))
                groups[k] = v
    result: dict[str, Any] = {}
    if topics_only:
        result["topicConfigTable"], name = topics, "topic.json"
    elif groups_only:
        result["subscriptionGroupTable"], name = groups, "subscriptionGroup.json"
    else:
        result.update(topicConfigTable=topics, subscriptionGroupTable=groups)
        name = "metadata.json"
    result["exportTime"] = _now_ms()
    written = _write(d, name, result)
    return Shown({"path": written}, lines=[f"export {written} success"])


# the broker settings exportConfigs keeps, as 4.9.8 picks them
_CONFIG_KEYS = ("brokerClusterName", "brokerId", "brokerName", "brokerRole", "fileReservedTime", "filterServerNums",
                "flushDiskType", "maxMessageSize", "messageDelayLevel", "msgTraceTopicName", "slaveReadEnable",
                "traceOn", "traceTopicEnable", "useTLS", "autoCreateTopicEnable", "autoCreateSubscriptionGroup")


async def _broker_config(a: Admin, addr: str) -> dict[str, str]:
    r = await a.instance.invoke(addr, RequestCode.GET_BROKER_CONFIG, {}, what="broker config")
    text = (r.body or b"").decode("utf-8", "replace")
    return dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln)


CLUSTER = click.option("-c", "--clusterName", "cluster", required=True)
EXPORT_PATH = click.option("-f", "--filePath", "path", default=EXPORT_DIR, show_default=True)


@command("exportConfigs", CLUSTER, EXPORT_PATH)
async def export_configs(t: Tools, cluster: str, path: str) -> Shown:
    """Write the cluster's scale (name servers, masters, slaves) and its masters' main settings to configs.json."""
    d = _export_dir(path)
    configs: dict[str, dict[str, str]] = {}
    masters = slaves = 0
    async with t.admin() as a:
        info = await a.cluster_info()
        for name in info.clusters.get(cluster.strip(), []):
            addrs = info.brokers.get(name) or {}
            if 0 not in addrs:
                continue
            cfg = await _broker_config(a, addrs[0])
            masters += 1
            slaves += len(addrs) - 1
            configs[cfg.get("brokerName", name)] = {k: cfg[k] for k in _CONFIG_KEYS if k in cfg}
        scale = {"namesrvSize": len(a.instance.namesrv_addrs), "masterBrokerSize": masters,
                 "slaveBrokerSize": slaves}
    written = _write(d, "configs.json", {"brokerConfigs": configs, "clusterScale": scale})
    return Shown({"path": written}, lines=[f"export {written} success"])


def _day_sum(stats: dict[str, Any] | None) -> int:
    """The last 24 hours' count of a BrokerStatsData: the day's sum, else the hour's, else the minute's."""
    if not stats:
        return 0
    for key in ("statsDay", "statsHour", "statsMinute"):
        n = int((stats.get(key) or {}).get("sum") or 0)
        if n:
            return n
    return 0


def _first_float(text: Any) -> float:
    try:
        return float(str(text).split()[0])
    except (IndexError, ValueError):
        return 0.0


@command("exportMetrics", CLUSTER, EXPORT_PATH)
async def export_metrics(t: Tools, cluster: str, path: str) -> Shown:
    """Write each master's environment, load (TPS, last day's counts, disk use, sizes) and client
    versions, and the cluster's totals, to metrics.json."""
    d = _export_dir(path)
    report: dict[str, Any] = {}
    tps = dict.fromkeys(("totalNormalInTps", "totalNormalOutTps", "totalTransInTps", "totalScheduleInTps"), 0.0)
    days = dict.fromkeys(("normalOneDayInNum", "normalOneDayOutNum", "transOneDayInNum", "scheduleOneDayInNum"), 0)
    async with t.admin() as a:
        info = await a.cluster_info()
        for name in info.clusters.get(cluster.strip(), []):
            addr = (info.brokers.get(name) or {}).get(0)
            if addr is None:
                continue
            rt = await a.broker_runtime_info(addr)
            cfg = await _broker_config(a, addr)
            groups = (await _user_groups(a, addr)).get("subscriptionGroupTable") or {}
            topics = (await _user_topics(a, addr, False)).get("topicConfigTable") or {}
            stats = {}
            for topic in ("RMQ_SYS_TRANS_HALF_TOPIC", "SCHEDULE_TOPIC_XXXX"):
                try:
                    stats[topic] = await a.view_broker_stats(addr, "TOPIC_PUT_NUMS", topic)
                except ClientError:
                    stats[topic] = None
            trans, sched = stats["RMQ_SYS_TRANS_HALF_TOPIC"], stats["SCHEDULE_TOPIC_XXXX"]
            quota_tps = {"normalInTps": _first_float(rt.get("putTps")),
                         "normalOutTps": _first_float(rt.get("getTransferedTps")),
                         "transInTps": float(trans["statsMinute"]["tps"]) if trans else 0.0,
                         "scheduleInTps": float(sched["statsMinute"]["tps"]) if sched else 0.0}
            one_day = {"normalOneDayInNum": int(rt.get("msgPutTotalTodayMorning") or 0)
                       - int(rt.get("msgPutTotalYesterdayMorning") or 0),
                       "normalOneDayOutNum": int(rt.get("msgGetTotalTodayMorning") or 0)
                       - int(rt.get("msgGetTotalYesterdayMorning") or 0),
                       "transOneDayInNum": _day_sum(trans), "scheduleOneDayInNum": _day_sum(sched)}
            for v, total in zip(quota_tps.values(), tps, strict=True):
                tps[total] += v
            for k, v in one_day.items():
                days[k] += v
            clients = set()
            for g in groups:
                try:
                    conn = await a.consumer_connection(g)
                except ClientError:
                    continue
                clients |= {f"{c.get('language')}%{version_desc(c.get('version'))}"
                            for c in conn.get("connectionSet") or []}
            report[name] = {
                "runtimeEnv": {"cpuNum": cfg.get("clientCallbackExecutorThreads"),
                               "totalMemKBytes": rt.get("totalMemKBytes")},
                "runtimeQuota": {"diskRatio": {"commitLogDiskRatio": rt.get("commitLogDiskRatio"),
                                               "consumeQueueDiskRatio": rt.get("consumeQueueDiskRatio")},
                                 "tps": quota_tps, "oneDayNum": one_day,
                                 "messageAverageSize": rt.get("putMessageAverageSize"),
                                 "topicSize": len(topics), "groupSize": len(groups)},
                "runtimeVersion": {"rocketmqVersion": version_desc(DEFAULT_VERSION), "clientInfo": sorted(clients)}}
    written = _write(d, "metrics.json", {"evaluateReport": report, "totalData": {"totalTps": tps,
                                                                                 "totalOneDayNum": days}})
    return Shown({"path": written}, lines=[f"export {written} success"])


# ---------------------------------------------------------------------------------------------- producers


@command("producer", click.option("-b", "--broker", "broker", required=True, help="broker address"))
async def producer(t: Tools, broker: str) -> Shown:
    """Every producer group connected to a broker, one line per instance (GET_ALL_PRODUCER_INFO)."""
    async with t.admin() as a:
        data = await a.all_producer_info(broker.strip())
    lines = []
    for group in java_order(data):
        members = data[group] or []
        if not members:
            lines.append(f"producer group ({group}) instances are empty")
        for p in members:
            lines.append(f"producer group ({group}) instance : clientId={p.get('clientId')},"
                         f"remoteIP={p.get('remoteIP')}, language={p.get('language')}, version={p.get('version')}, "
                         f"lastUpdateTimestamp={p.get('lastUpdateTimestamp')}")
    return Shown(data, lines=lines)


# ---------------------------------------------------------------------------------------------- monitoring

_MONITOR = "[MONITOR] "


@command("startMonitoring",
         click.option("--delay", type=float, default=20.0, show_default=True, help="seconds before the first round (rmq's)"),
         click.option("--interval", type=float, default=30.0, show_default=True, help="seconds between rounds (rmq's)"),
         click.option("--rounds", type=int, default=None, help="stop after this many rounds (rmq's; default: never)"))
async def start_monitoring(t: Tools, delay: float, interval: float, rounds: int | None) -> Shown:
    """mqadmin's monitor: every round, for each consumer group online, its undone messages per topic
    (total, the most on one queue, how far its last consumed message is behind the newest) and whether
    its push members subscribe alike; printed as mqadmin's monitor logs them. Runs until stopped."""
    await anyio.sleep(delay)
    done = 0
    while True:
        shown = await _monitor_round(t)
        done += 1
        if rounds is not None and done >= rounds:
            return shown
        shown.show(False)
        await anyio.sleep(interval)


async def _monitor_round(t: Tools) -> Shown:
    reports: list[dict[str, Any]] = []
    lines = [f"{_MONITOR}=========================================beginRound"]
    async with t.admin() as a, t.consumer("TOOLS_CONSUMER") as pc:
        for topic in java_order(await a.list_topics()):
            if not topic.startswith("%RETRY%"):
                continue
            group = topic[len("%RETRY%"):]
            try:
                progress = await a.consumer_progress(group)
                conn = await a.consumer_connection(group)
            except ClientError:
                continue  # mqadmin's monitor skips a group it cannot read or that is offline
            by_topic: dict[str, list[Any]] = {}
            for p in progress:
                by_topic.setdefault(p.queue.topic, []).append(p)
            for name in java_order(by_topic):
                undone = await _undone(pc, group, name, by_topic[name])
                reports.append(undone)
                lines.append(f"{_MONITOR}reportUndoneMsgs: UndoneMsgs [consumerGroup={group}, topic={name}, "
                             f"undoneMsgsTotal={undone['undoneMsgsTotal']}, "
                             f"undoneMsgsSingleMQ={undone['undoneMsgsSingleMQ']}, "
                             f"undoneMsgsDelayTimeMills={undone['undoneMsgsDelayTimeMills']}]")
            infos = {}
            for c in sorted(conn.get("connectionSet") or [], key=lambda c: str(c.get("clientId"))):
                try:
                    infos[c["clientId"]] = await a.consumer_running_info(group, c["clientId"])
                except ClientError:
                    continue
            if infos and not _same_subscriptions(infos):
                lines.append(f"{_MONITOR} [NOTIFY] reportConsumerRunningInfo: ConsumerGroup: {group}, "
                             "Subscription different")
    lines.append(f"{_MONITOR}=========================================endRound")
    return Shown(reports, lines=lines)


async def _undone(pc: Any, group: str, topic: str, progress: list[Any]) -> dict[str, Any]:
    """A group's backlog on a topic: the total, the largest on one queue, and the delay of its last
    consumed message behind the queue's newest (store times), the largest over the queues."""
    total = single = delay = 0
    await pc.fetch_queues(topic)
    for p in progress:
        diff = p.max_offset - max(p.committed, 0)  # the broker counts a queue never committed from 0
        single = max(single, diff)
        total += max(diff, 0)
        if p.last_timestamp > 0 and p.max_offset > 0:
            try:
                r = await pc.pull(p.queue, p.max_offset - 1, 1)
            except ClientError:
                continue
            if r.status is PullStatus.FOUND and r.messages:
                delay = max(delay, r.messages[0].store_timestamp - p.last_timestamp)
    return {"consumerGroup": group, "topic": topic, "undoneMsgsTotal": total, "undoneMsgsSingleMQ": single,
            "undoneMsgsDelayTimeMills": delay}


def _same_subscriptions(infos: dict[str, dict[str, Any]]) -> bool:
    """mqadmin's analyzeSubscription: push members running for over two minutes (as the first member,
    by client id, says) must all subscribe alike, and to something; anything else passes."""
    first = next(iter(infos.values()))
    props = first.get("properties") or {}
    kind = props.get("PROP_CONSUME_TYPE", props.get("consumeType"))
    started = props.get("PROP_CONSUMER_START_TIMESTAMP")
    if kind != "CONSUME_PASSIVELY" or started is None or _now_ms() - int(started) <= 120_000:
        return True

    def subs(info: dict[str, Any]) -> list[str]:
        return sorted(json.dumps(s, sort_keys=True) for s in info.get("subscriptionSet") or [])

    sets = [subs(i) for i in infos.values()]
    return all(s == sets[0] for s in sets) and bool(sets[-1])
