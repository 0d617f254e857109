"""rmq.connectors: bridges from RocketMQ topics to data systems."""
