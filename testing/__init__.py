"""rmq.testing: what a plugin's tests need, as pytest's ``pytester`` is for pytest plugins.

- ``make_kernel`` builds a kernel from inline plugin objects (no entry points);
- contract-test base classes per Protocol (``storage``, ``flush``, ``filtering``,
  ``allocation``, ``remoting``) for a plugin's test suite to subclass;
- ``daemon.RmqdProcess`` and the ``rmqd`` / ``rmqd_factory`` fixtures (``plugin``, loaded
  by pytest through the ``pytest11`` entry point): real ``rmqd`` processes on loopback;
- ``fuzz``: the hypothesis profiles the decoders' fuzz properties run under.

It lives outside ``rmq.kernel`` so that the kernel is only the kernel.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rmq.kernel.config import RootConfig, structure_config
from rmq.kernel.kernel import Kernel

# An in-process broker shares its event loop and its process with the test driving it: a busy machine
# that deschedules the process for half a second looks to the send flow control like a stalled loop,
# and RocketMQ's 200 ms waitTimeMillsInSendQueue then answers the test's send SYSTEM_BUSY. Past a
# minute every test's own request timeouts have failed it anyway, so flow control never decides a
# test's outcome unless the test sets the wait itself (tests/plugins/broker/test_flow_control.py).
TEST_SEND_QUEUE_WAIT_MS = 60_000


def make_kernel(plugins: Iterable[object] = (), config: dict[str, Any] | RootConfig | None = None) -> Kernel:
    """A kernel with exactly ``plugins`` registered (no entry points consulted).

    ``config`` is a TOML-shaped dict (default: a broker with default settings) or a
    ``RootConfig``. The same fail-closed validation as the daemon applies. A ``namesrv``
    section without ``kvConfigPath`` gets a fresh path under the temp directory (written
    only if the test stores KV config), never the home directory. A ``broker`` section without
    ``waitTimeMillsInSendQueue`` gets :data:`TEST_SEND_QUEUE_WAIT_MS`.
    """
    if config is None:
        config = {"broker": {}}
    broker = config.get("broker") if isinstance(config, dict) else None
    if isinstance(broker, dict) and "waitTimeMillsInSendQueue" not in broker:
        config = {**config, "broker": {**broker, "waitTimeMillsInSendQueue": TEST_SEND_QUEUE_WAIT_MS}}
    namesrv = config.get("namesrv") if isinstance(config, dict) else None
    if isinstance(namesrv, dict) and "kvConfigPath" not in namesrv:
        # a test's name server keeps its KV file out of the home directory (RocketMQ's default place)
        unique = Path(tempfile.gettempdir()) / f"rmq-kv-{uuid.uuid4().hex}" / "kvConfig.json"
        config = {**config, "namesrv": {**namesrv, "kvConfigPath": str(unique)}}
    cfg = config if isinstance(config, RootConfig) else structure_config(config, "<make_kernel>")
    kernel = Kernel(cfg)
    for i, obj in enumerate(plugins):
        kernel.add_plugin(obj, f"inline:{i}:{type(obj).__name__}")
    return kernel
