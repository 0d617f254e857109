"""rmq.kernel: the contracts plugins are written against.

Plugin authors need: ``hookimpl`` (mark implementations), the Protocols in
``rmq.kernel.hookspecs.*``, the value types in ``rmq.kernel.model`` and, for
tests, ``rmq.kernel.testing``.
"""

from rmq.kernel.config import BrokerConfig, ConfigError, NamesrvConfig, RootConfig, load_config
from rmq.kernel.markers import hookimpl, hookspec
from rmq.kernel.plugin_manager import PluginError

__all__ = [
    "BrokerConfig",
    "ConfigError",
    "NamesrvConfig",
    "PluginError",
    "RootConfig",
    "hookimpl",
    "hookspec",
    "load_config",
]
