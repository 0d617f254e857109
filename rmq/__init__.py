"""rmq: Apache RocketMQ rebuilt in Python as a small kernel plus plugins.

The import root only; the code lives in the top-level folders mapped onto
``rmq.kernel``, ``rmq.plugins``, ``rmq.protocol``, ``rmq.client`` and
``rmq.connectors`` by ``pyproject.toml``.
"""

__version__ = "0.1.0"
