"""rmq.protocol: sans-IO RocketMQ 4.x wire codecs shared by the broker and the client.

Pure functions over bytes; nothing here opens a socket, a file or a process
(``tests/protocol/test_pure.py`` keeps it so).
"""
