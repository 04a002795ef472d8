"""Protocol codecs shared by the clients (``mqbench.transports``), the built-in broker
(``mqbench.builtin_broker``) and the calibration relays: pure functions and data, no I/O.

Modules: ``mqtt`` (MQTT 3.1.1/5 packets, properties, parser, reason codes), ``nats`` (the
NATS core text protocol), ``resp`` (RESP2 for Redis Pub/Sub), ``amqp`` (AMQP 0-9-1
framing), ``topics`` (MQTT topic names and filters: matching, the topic trie, translations
to other protocols' subjects). Nothing here imports mqbench beyond ``mqbench.errors``.
"""
