"""rmq.roles: the tables of rmqd's roles, as a RocketMQ operator writes them (``[namesrv]``, ``[controller]``,
``[broker]``) and the broker's gRPC proxy (``[proxy]``).

The kernel knows no role's keys: it finds the class of each top-level table through the entry point
group ``rmq.sections`` (table name -> attrs class; see ``rmq.kernel.config``) and structures the
table with it, strictly. A role's class also says what the role runs: ``plugins()`` (default: the
``rmq.processors`` plugin named like the role), ``problem()`` (the start-up rules), ``embedded``
(its table in rmqd's no-config default). The classes live here, not in a plugin, because several
plugins read them (every store, flush, replication and ACL plugin reads ``BrokerConfig``) and no
plugin may import another.
"""

from rmq.roles.broker import BrokerConfig
from rmq.roles.controller import ControllerConfig
from rmq.roles.namesrv import NamesrvConfig
from rmq.roles.proxy import ProxyConfig

__all__ = ["BrokerConfig", "ControllerConfig", "NamesrvConfig", "ProxyConfig"]
