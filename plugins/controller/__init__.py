"""The controller role (RocketMQ 5's controller): replicated broker-set metadata and master election.

``state``: the deterministic state machine (replicas, SyncStateSet, epochs, the election
policy). ``raft``: that state replicated across controller nodes by pysyncobj.
"""
