"""The source and sink on a broker with ACL on: accessKey/secretKey options sign every request;
without them the write fails with the broker's reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.protocol.acl import sign
from rmq.protocol.codes import RequestCode
from rmq.testing.daemon import RmqdProcess

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

USER = ("sparkuser", "sparksecret")


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RmqdProcess]:
    work: Path = tmp_path_factory.mktemp("spark-acl")
    (work / "plain_acl.yml").write_text(
        f"accounts:\n  - accessKey: {USER[0]}\n    secretKey: {USER[1]}\n    defaultTopicPerm: PUB|SUB\n"
        "    defaultGroupPerm: SUB\n  - accessKey: sparkadmin\n    secretKey: adminsecret\n    admin: true\n")
    proc = RmqdProcess(work / "d", broker_conf={"aclEnable": True, "plainAclFile": str(work / "plain_acl.yml")})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def create_topic(proc: RmqdProcess, topic: str) -> None:
    from rmq.kernel.hookspecs.remoting import RemotingConfig
    from rmq.plugins.remoting_tcp import TcpRemotingClient
    from rmq.protocol.command import RemotingCommand

    async def go() -> None:
        cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6",
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})
        sign(cmd.ext, cmd.body, "sparkadmin", "adminsecret")
        async with TcpRemotingClient(RemotingConfig(name="spark-acl")) as c:
            assert (await c.invoke(proc.broker_addr, cmd, 5)).code == 0

    anyio.run(go)


def test_signed_write_and_read(spark: Any, acl_broker: RmqdProcess) -> None:
    create_topic(acl_broker, "SparkAcl")
    ns = acl_broker.namesrv_addr
    df = spark.createDataFrame([(f"v{i}",) for i in range(50)], "value string")
    (df.write.format("rocketmq").option("nameserver", ns).option("topic", "SparkAcl")
        .option("accessKey", USER[0]).option("secretKey", USER[1]).mode("append").save())
    rows = (spark.read.format("rocketmq").option("nameserver", ns).option("subscribe", "SparkAcl")
            .option("accessKey", USER[0]).option("secretKey", USER[1]).load().collect())
    assert sorted(bytes(r.value).decode() for r in rows) == sorted(f"v{i}" for i in range(50))
    with pytest.raises(Exception, match="NO_PERMISSION|No accessKey"):
        df.write.format("rocketmq").option("nameserver", ns).option("topic", "SparkAcl").mode("append").save()
    with pytest.raises(Exception, match="accessKey and secretKey together"):
        df.write.format("rocketmq").option("nameserver", ns).option("topic", "SparkAcl") \
            .option("accessKey", USER[0]).mode("append").save()
