"""The device store's Lua scripts against a real redis-server (async and sync stores)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from mqbench.brokers.services.backing import RedisService
from mqbench.builtin_broker.persistence.base import Fetch, Save
from mqbench.builtin_broker.persistence.redis_store import (
    AsyncRedisDeviceStore,
    SyncRedisDeviceStore,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway redis-server for this module."""
    service = RedisService(Path(tmp_path_factory.mktemp("redis"))).start()
    try:
        yield service.url
    finally:
        service.stop()


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    try:
        yield client
    finally:
        client.close()


def _run(store_cls: type[Any], url: str, limit: int, *ops_lists: list[Any]) -> list[list[Any]]:
    async def go() -> list[list[Any]]:
        store = store_cls(url, limit)
        await store.start()
        try:
            return [await store.execute(ops) for ops in ops_lists]
        finally:
            await store.close()

    return asyncio.run(go())


STORES = [AsyncRedisDeviceStore, SyncRedisDeviceStore]


@pytest.mark.parametrize("store_cls", STORES)
def test_packet_ids_65534_65535_1_keep_their_order_with_a_growing_score(
    store_cls: type[Any], redis_url: str, r: redis.Redis
) -> None:
    r.set("{c}_last_packet_id", 65533)
    saved, fetched = _run(
        store_cls,
        redis_url,
        100,
        [Save("c", [b"a"], [60]), Save("c", [b"b"], [60]), Save("c", [b"c"], [60])],
        [Fetch("c")],
    )
    assert saved == [[65534], [65535], [1]]
    assert r.zrange("{c}_messages", 0, -1, withscores=True) == [
        (b"{c}_messages_65534", 65534.0),
        (b"{c}_messages_65535", 65535.0),
        (b"{c}_messages_1", 65536.0),
    ]
    assert fetched == [[(65534, b"a"), (65535, b"b"), (1, b"c")]]
    assert r.get("{c}_last_packet_id") == b"1"
    assert r.ttl("{c}_last_packet_id") == -1
    assert 0 < r.ttl("{c}_messages_1") <= 60


@pytest.mark.parametrize("store_cls", STORES)
def test_trimming_past_the_limit_removes_the_oldest_strings_too(
    store_cls: type[Any], redis_url: str, r: redis.Redis
) -> None:
    _run(store_cls, redis_url, 3, [Save("c", [b"1", b"2", b"3", b"4", b"5"], [0] * 5)])
    assert r.zcard("{c}_messages") == 3
    assert r.exists("{c}_messages_1") == 0 and r.exists("{c}_messages_2") == 0
    assert r.get("{c}_messages_3") == b"3" and r.ttl("{c}_messages_3") == -1


@pytest.mark.parametrize("store_cls", STORES)
def test_expired_strings_are_dropped_from_the_set_on_fetch(
    store_cls: type[Any], redis_url: str, r: redis.Redis
) -> None:
    _run(store_cls, redis_url, 10, [Save("c", [b"gone", b"kept"], [60, 60])])
    r.delete("{c}_messages_1")  # what an expired EX does
    (fetched,) = _run(store_cls, redis_url, 10, [Fetch("c")])
    assert fetched == [[(2, b"kept")]]
    assert r.zrange("{c}_messages", 0, -1) == [b"{c}_messages_2"]


def test_concurrent_saves_for_one_client_never_lose_or_reorder(
    redis_url: str, r: redis.Redis
) -> None:
    writers, per_writer = 8, 60

    async def writer(k: int) -> list[int]:
        store = AsyncRedisDeviceStore(redis_url, 65535)
        await store.start()
        pids: list[int] = []
        try:
            for start in range(0, per_writer, 6):
                batch = [Save("c", [f"{k}:{n}".encode()], [0]) for n in range(start, start + 6)]
                for ids in await store.execute(batch):
                    pids += ids
                await asyncio.sleep(0)
        finally:
            await store.close()
        return pids

    async def go() -> tuple[list[list[int]], list[Any]]:
        pids = await asyncio.gather(*(writer(k) for k in range(writers)))
        store = AsyncRedisDeviceStore(redis_url, 65535)
        await store.start()
        try:
            (fetched,) = await store.execute([Fetch("c")])
        finally:
            await store.close()
        return list(pids), fetched

    pids, fetched = asyncio.run(go())
    all_pids = [p for ids in pids for p in ids]
    assert sorted(all_pids) == list(range(1, writers * per_writer + 1))
    assert [pid for pid, _ in fetched] == list(range(1, writers * per_writer + 1))
    for k in range(writers):
        mine = [v for _, v in fetched if v.startswith(f"{k}:".encode())]
        assert mine == [f"{k}:{n}".encode() for n in range(per_writer)]


@pytest.mark.parametrize("store_cls", STORES)
def test_scripts_are_reloaded_after_noscript(
    store_cls: type[Any], redis_url: str, r: redis.Redis
) -> None:
    async def go() -> tuple[list[Any], int]:
        store = store_cls(redis_url, 10)
        await store.start()
        try:
            r.script_flush()
            result = await store.execute([Save("c", [b"x"], [0]), Fetch("c")])
            return result, store.reloads
        finally:
            await store.close()

    result, reloads = asyncio.run(go())
    assert result == [[1], [(1, b"x")]]
    assert reloads >= 1
