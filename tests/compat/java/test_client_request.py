"""Request-reply (DefaultMQProducer.request, MessageUtil.createReplyMessage) against rmqd and the Java
4.9.8 broker: the reply the requester gets, the request the responder saw, and an unanswered request."""

from __future__ import annotations

from typing import Any

import pytest

from .judge import Judge, rotate_queues

pytestmark = pytest.mark.java

# wall clocks: the broker's when it pushed the reply (PUSH_REPLY_TIME), the requester's when it came
PUSH_TIME = ("PUSH_REPLY_TIME", "ARRIVE_TIME")


def reply_queue_unjudged(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reply topic's queue is the responder's producer's round-robin pick from a random start."""
    out = rotate_queues(lines)
    for line in out:
        if line["kind"] == "reply" and line.get("message"):
            line["message"].pop("queueId")
    return out


def test_request_reply(judge: Judge, names: str) -> None:
    seen = judge.same("request", topic=names, normalise=reply_queue_unjudged, drop=PUSH_TIME)
    replies = [x for x in seen if x["kind"] == "reply"]
    assert [r["message"]["body"] for r in replies[:2]] == ["reply-to-body-0-x", "reply-to-body-1-x"]
    assert replies[2]["error"]["class"] == "RequestTimeoutException"
