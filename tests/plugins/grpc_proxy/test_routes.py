"""Routes and assignments of the gRPC endpoint in a broker group with a master and a slave, as the 5.x
proxy answers them (RouteActivity): every broker under its own id with its own endpoint, whichever
broker is asked, and assignments on the master only. A master and its slave share a host here, each
with its own gRPC port: the route still names each one's (the broker's runtime info says it)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.plugins.grpc_proxy.v2 import service_pb2_grpc as sg
from rmq.protocol.codes import RequestCode
from rmq.testing import faults as F
from rmq.testing.daemon import call, eventually

pytestmark = pytest.mark.integration  # starts rmqd processes itself (tests/conftest.py: tiers)

MD = (("x-mq-client-id", "routes@1@1@x"),)
TOPIC = "GRoutes"


def ask(endpoint: str) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """(broker id, endpoint port) of the route's queues and of the assignments, as ``endpoint`` answers."""
    with grpc.insecure_channel(endpoint) as ch:
        stub = sg.MessagingServiceStub(ch)
        route = stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name=TOPIC)), metadata=MD, timeout=10)
        assign = stub.QueryAssignment(s.QueryAssignmentRequest(topic=d.Resource(name=TOPIC),
                                                               group=d.Resource(name="CG_ROUTES")), metadata=MD,
                                      timeout=10)
    assert route.status.code == d.OK and assign.status.code == d.OK, (route.status, assign.status)
    return ({(q.broker.id, q.broker.endpoints.addresses[0].port) for q in route.message_queues},
            {(a.message_queue.broker.id, a.message_queue.broker.endpoints.addresses[0].port) for a in assign.assignments})


def test_master_and_slave_answer_the_same_route_and_assign_the_master(tmp_path: Path) -> None:
    c = F.start_cluster("classic", tmp_path)
    try:
        master, slave = c.brokers
        F.create_topic(c, TOPIC)
        eventually(lambda: b'"1":' in call(c.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}).body,
                   30, "the slave's entry in the topic's route")
        want_route = {(0, master.grpc_port), (1, slave.grpc_port)}
        for who in (master, slave):
            route, assigned = ask(who.grpc_endpoint)
            assert route == want_route, (who.grpc_endpoint, route)
            assert assigned == {(0, master.grpc_port)}, (who.grpc_endpoint, assigned)  # POP goes to the master
    finally:
        c.stop()
