"""Hook specifications, one module per concern; each module is the documentation of its concern.

Every hook is synchronous and runs at start-up or once per subscription/group,
never per message: hooks build objects, the objects do the work.
"""

from rmq.kernel.hookspecs import (
    allocation,
    broker,
    dispatch,
    filtering,
    flush,
    lifecycle,
    processors,
    remoting,
    replication,
    storage,
)

SPEC_MODULES = (
    lifecycle, storage, dispatch, allocation, filtering, flush, replication, remoting, processors, broker
)
