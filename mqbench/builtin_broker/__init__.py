"""mqbench's built-in TBMQ-style MQTT 3.1.1/5 broker (target ``tbmq-style``).

An asyncio broker modelled on TBMQ's design (docs/broker.md): DEVICE and APPLICATION
clients, persistent DEVICE sessions in a device store (memory, Redis async/pipelined, Redis
sync, PostgreSQL) using TBMQ's Redis key scheme and Lua scripts, APPLICATION queues (memory
or Redis Streams). It shares its MQTT codec and topic matching with the client transport
(``mqbench.wire.mqtt``, ``mqbench.wire.topics``).

Modules: ``config`` (settings, client types), ``message`` (stored form), ``session``
(delivery window and persistence hand-off), ``shared`` (MQTT 5 shared subscription
groups), ``connection`` (one client), ``server`` (the broker), ``persistence`` (backends),
``run`` (serve until a signal).
"""

from __future__ import annotations

from mqbench.builtin_broker.config import BrokerConfig, ClientType
from mqbench.builtin_broker.server import Broker

__all__ = ["Broker", "BrokerConfig", "ClientType"]
