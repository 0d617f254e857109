"""rmq.kernel: everything a plugin is written against, in one import.

A plugin is a module (or class instance) with ``@hookimpl`` functions named after
the hook specs, published under an entry point group ``rmq.<concern>``::

    # pyproject.toml of your distribution
    [project.entry-points."rmq.allocation"]
    nearest = "my_pkg.nearest:plugin"

    # my_pkg/nearest.py
    import attrs
    from rmq.kernel import AllocateStrategy, MessageQueue, hookimpl, structure_options

    @attrs.define
    class Options:              # the plugin's own table: [plugin.allocation.nearest]
        zone: str = ""

    class Nearest:
        name = "NEAREST"
        def allocate(self, group, current_cid, mqs, cids): ...

    class Plugin:
        def __init__(self, options=None):
            self.options = structure_options(Options, options)   # strict errors; `rmqd config` shows it
        @hookimpl
        def rmq_allocation_register_strategies(self, registry):
            registry.register("nearest", lambda **kw: Nearest())

    plugin = Plugin

and selected in ``rmqd.toml`` (``[plugins] allocation = ["nearest"]``). The hook specs
and the contract of each Protocol are documented in ``rmq.kernel.hookspecs.<concern>``;
the roles' tables (``[broker]`` and the others) are ``rmq.roles``, not the kernel's;
``rmq.testing`` has the contract test suites a plugin's tests subclass. The bundled
plugins import the kernel only from here (and no other plugin), exactly as a third party's would.
"""

from rmq.kernel.config import ConfigError, RootConfig, load_config, rmq_home
from rmq.kernel.hookspecs.allocation import AllocateStrategy, StrategyRegistry
from rmq.kernel.hookspecs.broker import BrokerContext, PutStage
from rmq.kernel.hookspecs.dispatch import CommitLogDispatcher
from rmq.kernel.hookspecs.filtering import FilterExpressionError, MessageFilter
from rmq.kernel.hookspecs.flush import Flushable, FlushPolicy
from rmq.kernel.hookspecs.lifecycle import MASTER, SLAVE
from rmq.kernel.hookspecs.processors import ProcessorRegistry, RequestInterceptor
from rmq.kernel.hookspecs.remoting import (
    Connection,
    RemotingClient,
    RemotingConfig,
    RemotingServer,
    RequestHandler,
)
from rmq.kernel.hookspecs.replication import ReplicationService
from rmq.kernel.hookspecs.storage import ForcedCleanHook, MessageStore, ReplicaError, ReplicaLog
from rmq.kernel.kernel import Kernel, make_handler
from rmq.kernel.loops import OwnLoops
from rmq.kernel.markers import hookimpl, hookspec
from rmq.kernel.metafile import ConfigFile, DataVersion, PersistedTable, dumps
from rmq.kernel.model import (
    DispatchRequest,
    GetResult,
    GetStatus,
    MessageQueue,
    MessageRecord,
    PutResult,
    PutStatus,
    record_of,
)
from rmq.kernel.net import check_bindable, local_ipv4, source_host
from rmq.kernel.options import NoOptions, structure_options
from rmq.kernel.paths import ConfinementError, confined_path, remove_confined
from rmq.kernel.plugin_manager import PluginError
from rmq.kernel.ratelimit import RateLimitedLog
from rmq.kernel.watermark import Watermark

__all__ = [
    "AllocateStrategy",
    "BrokerContext",
    "CommitLogDispatcher",
    "ConfigError",
    "ConfigFile",
    "ConfinementError",
    "Connection",
    "DataVersion",
    "DispatchRequest",
    "FilterExpressionError",
    "FlushPolicy",
    "ForcedCleanHook",
    "ReplicaError",
    "ReplicaLog",
    "Flushable",
    "GetResult",
    "GetStatus",
    "Kernel",
    "MASTER",
    "MessageFilter",
    "MessageQueue",
    "MessageRecord",
    "MessageStore",
    "NoOptions",
    "PersistedTable",
    "PluginError",
    "ProcessorRegistry",
    "make_handler",
    "PutResult",
    "PutStage",
    "PutStatus",
    "OwnLoops",
    "RateLimitedLog",
    "RemotingClient",
    "RemotingConfig",
    "RemotingServer",
    "ReplicationService",
    "RequestHandler",
    "RequestInterceptor",
    "RootConfig",
    "SLAVE",
    "StrategyRegistry",
    "Watermark",
    "confined_path",
    "dumps",
    "hookimpl",
    "hookspec",
    "load_config",
    "rmq_home",
    "check_bindable",
    "local_ipv4",
    "source_host",
    "record_of",
    "remove_confined",
    "structure_options",
]
