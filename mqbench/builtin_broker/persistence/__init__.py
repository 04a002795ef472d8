"""Persistence backends of the TBMQ-style broker.

``base`` defines the operations (SAVE, FETCH, REMOVE, MARK_PUBREL, CLEAR for DEVICE
sessions; APPEND, READ, ACK, CLEAR for APPLICATION queues), the backend interfaces and the
ordered operation queue that batches them; ``memory``, ``redis_store`` (async pipelined and
sync one-command-at-a-time, Lua scripts in ``lua``), ``postgres`` and ``app_queue`` implement
them. ``create_device_store`` / ``create_app_queue`` build one from a config.
"""

from __future__ import annotations

from mqbench.builtin_broker.config import BrokerConfig
from mqbench.builtin_broker.persistence.base import AppQueue, DeviceStore


def create_device_store(config: BrokerConfig) -> DeviceStore:
    """The device store the config asks for (not started)."""
    if config.persistence == "memory":
        from mqbench.builtin_broker.persistence.memory import MemoryDeviceStore

        return MemoryDeviceStore(config.messages_limit)
    if config.persistence in ("redis-async", "redis-sync"):
        from mqbench.builtin_broker.persistence.redis_store import (
            AsyncRedisDeviceStore,
            SyncRedisDeviceStore,
        )

        cls = AsyncRedisDeviceStore if config.persistence == "redis-async" else SyncRedisDeviceStore
        return cls(config.redis_url, config.messages_limit)
    from mqbench.builtin_broker.persistence.postgres import PostgresDeviceStore

    return PostgresDeviceStore(config.postgres_dsn, config.messages_limit)


def create_app_queue(config: BrokerConfig) -> AppQueue:
    """The APPLICATION queue the config asks for (not started)."""
    if config.app_queue == "redis-streams":
        from mqbench.builtin_broker.persistence.app_queue import RedisStreamsAppQueue

        return RedisStreamsAppQueue(config.redis_url, config.app_queue_limit)
    from mqbench.builtin_broker.persistence.app_queue import MemoryAppQueue

    return MemoryAppQueue(config.app_queue_limit)


__all__ = ["AppQueue", "DeviceStore", "create_app_queue", "create_device_store"]
