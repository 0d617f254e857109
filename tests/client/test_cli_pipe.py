"""rmqadmin's tables through a pipe: whole values, one row a line, mqadmin's printf way, whatever the
width of a terminal (issue #29 item 2) - a script reading ``rmqadmin ... | awk`` gets every value."""

from __future__ import annotations

import os
import subprocess
from typing import Any

from rmq.testing.daemon import RmqdProcess
from rmq.testing.rmqadmin import RMQADMIN, run


def test_piped_tables_are_never_cut_or_wrapped(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    ns = ["-n", proc.namesrv_addr]
    topic = "PipeTopic_" + "x" * 90  # wider than any terminal column
    run("updateTopic", *ns, "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2")
    body = "a long body " * 20
    sent = run("sendMessage", *ns, "-t", topic, "-p", body, "-k", "pipe-key").stdout
    # a narrow terminal width in the environment must not matter when stdout is a pipe
    env = {**os.environ, "COLUMNS": "40"}
    out = subprocess.run([RMQADMIN, "topicStatus", *ns, "-t", topic], capture_output=True, text=True, timeout=60,
                         env=env).stdout
    lines = out.splitlines()
    assert lines[0].split() == ["#Broker", "Name", "#QID", "#Min", "Offset", "#Max", "Offset", "#Last", "Updated"]
    assert len(lines) == 3 and all(ln.split()[0] == "broker-a" for ln in lines[1:])
    printed = subprocess.run([RMQADMIN, "consumeMessage", *ns, "-t", topic], capture_output=True, text=True,
                             timeout=60, env=env).stdout.splitlines()
    assert len(printed) == 2 and printed[1].endswith(body.strip())
    keyed = subprocess.run([RMQADMIN, "queryMsgByKey", *ns, "-t", topic, "-k", "pipe-key"], capture_output=True,
                           text=True, timeout=60, env=env).stdout.splitlines()
    msg_id = sent.splitlines()[1].split()[-1]
    assert len(keyed) == 2 and keyed[1].split()[0] == msg_id and len(msg_id) >= 32
    assert not any("…" in ln or "┃" in ln for ln in lines + printed + keyed)
    listed = subprocess.run([RMQADMIN, "topicList", *ns], capture_output=True, text=True, timeout=60, env=env).stdout
    assert topic in listed.splitlines()
