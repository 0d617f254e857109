"""A peer broker's runtime info is peer data: the ``grpcServerPort`` it names (routes.said_port) is a port
1..65535 or nothing, whatever JSON value the peer put there — never an exception, never a port out of
range, never a long string handed to ``int`` (Python refuses more than 4300 digits by raising)."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from rmq.plugins.grpc_proxy.routes import said_port
from rmq.testing.fuzz import fuzz_settings

_ASCII_DIGITS = re.compile(r"[0-9]+")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3),
    max_leaves=6)
port_like = (st.integers(min_value=-10, max_value=70_000).map(str)
             | st.builds(lambda zeros, n: "0" * zeros + str(n), st.integers(0, 6000), st.integers(0, 70_000))
             | st.text(alphabet="0123456789+-_ .e²٣\u0660\uff11", max_size=8))


def expected(value: Any) -> int | None:
    """The oracle: what a port spelled in ASCII digits (or an int) is, when in range."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 1 <= value <= 65535 else None
    if isinstance(value, str) and _ASCII_DIGITS.fullmatch(value):
        significant = value.lstrip("0")
        return int(significant) if significant and len(significant) <= 5 and 1 <= int(significant) <= 65535 else None
    return None


@fuzz_settings(500)
@given(st.one_of(port_like, st.text(max_size=40), json_values, st.integers()))
@example("٣")  # str.isdigit takes it, int() reads 3: not a port a broker writes
@example("²")  # str.isdigit takes it, int() raises
@example("0" * 5000 + "80")  # 80, without handing 5000 digits to int()
@example("9" * 5000)
@example("65535")
@example("65536")
@example("0")
@example(True)
@example(8081.0)
def test_grpc_server_port_is_a_port_or_nothing(value: Any) -> None:
    port = said_port(value)
    assert port is None or (type(port) is int and 1 <= port <= 65535)
    assert port == expected(value)
