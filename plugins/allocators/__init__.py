"""Bundled allocation strategies (entry-point namespace ``rmq.allocation``), one plugin per strategy name.

The strategy classes are usable directly (a client may build one without a kernel);
the plugins register factories with ``rmq_allocation_register_strategies``.
"""

from rmq.plugins.allocators._common import check_inputs
from rmq.plugins.allocators.averagely import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AveragelyByCirclePlugin,
    AveragelyPlugin,
)
from rmq.plugins.allocators.by_config import AllocateByConfig, ByConfigPlugin
from rmq.plugins.allocators.consistent_hash import AllocateConsistentHash, ConsistentHashPlugin, md5_hash32
from rmq.plugins.allocators.machine_room import (
    AllocateByMachineRoom,
    AllocateMachineRoomNearby,
    MachineRoomNearbyPlugin,
    MachineRoomPlugin,
    room_rule,
)

__all__ = [
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateByConfig",
    "AllocateByMachineRoom",
    "AllocateConsistentHash",
    "AllocateMachineRoomNearby",
    "AveragelyByCirclePlugin",
    "AveragelyPlugin",
    "ByConfigPlugin",
    "ConsistentHashPlugin",
    "MachineRoomNearbyPlugin",
    "MachineRoomPlugin",
    "check_inputs",
    "md5_hash32",
    "room_rule",
]
