"""The per-stream toxic pipeline, driven in an event loop without sockets.

Stages that would sleep use delays far longer than a test, so every assertion is about what
is in the sink at once, never about how long something took.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Coroutine
from typing import Any

from mqbench.faults.pipeline import (
    EOF,
    STAGES,
    Budget,
    Chunk,
    End,
    Item,
    Pipeline,
    Stage,
    make_stage,
)
from mqbench.faults.toxics import TOXIC_TYPES, validate_toxic


def _run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(body())


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _drain(pipeline: Pipeline) -> list[Item]:
    out = []
    while not pipeline.sink.empty():
        out.append(pipeline.sink.get_nowait())
    return out


def _add(pipeline: Pipeline, toxic_type: str, affected: bool = True, **attrs: int) -> None:
    toxic = validate_toxic(toxic_type, attrs, name=f"{toxic_type}{len(pipeline.stages)}")
    pipeline.append(make_stage(pipeline, toxic, affected, random.Random(1)))


def _feed(pipeline: Pipeline, *items: Item) -> None:
    for item in items:
        if isinstance(item, Chunk):
            pipeline.budget.take(len(item.data))
        pipeline.entry().put_nowait(item)


def test_a_latency_stage_releases_a_chunk_that_already_waited_its_delay_at_once() -> None:
    async def body() -> None:
        pipeline = Pipeline("downstream")
        _add(pipeline, "latency", latency=60_000)
        stamp = time.monotonic() - 61.0
        _feed(pipeline, Chunk(b"old", stamp))
        await _settle()
        (out,) = _drain(pipeline)
        assert isinstance(out, Chunk) and out.data == b"old"
        assert out.stamp < stamp  # Toxiproxy adds the negative sleep to the stamp
        pipeline.stop()

    _run(body)


def test_chunks_pass_noop_and_unaffected_stages_unchanged_in_order_then_the_end() -> None:
    async def body() -> None:
        pipeline = Pipeline("downstream")
        _add(pipeline, "noop")
        _add(pipeline, "latency", affected=False, latency=60_000)  # lost its toxicity roll
        _add(pipeline, "reset_peer")  # its effect is the link's timer
        _feed(pipeline, Chunk(b"a", 1.0), Chunk(b"b", 2.0), EOF)
        await _settle()
        assert _drain(pipeline) == [Chunk(b"a", 1.0), Chunk(b"b", 2.0), EOF]
        pipeline.stop()

    _run(body)


def test_a_latency_stage_holds_chunks_and_removing_it_releases_them_at_once_in_order() -> None:
    async def body() -> None:
        pipeline = Pipeline("downstream")
        _add(pipeline, "latency", latency=60_000)
        _add(pipeline, "noop")
        t = time.monotonic()  # the stage counts the delay from the chunk's stamp
        _feed(pipeline, Chunk(b"1", t), Chunk(b"2", t), Chunk(b"3", t))
        await _settle()
        assert _drain(pipeline) == []  # held for a minute
        pipeline.remove(pipeline.stages[0])
        _feed(pipeline, Chunk(b"4", t))
        await _settle()
        assert [c.data for c in _drain(pipeline) if isinstance(c, Chunk)] == [
            b"1",
            b"2",
            b"3",
            b"4",
        ]
        assert len(pipeline.stages) == 1
        pipeline.stop()

    _run(body)


def test_a_stage_added_behind_a_busy_one_receives_what_that_one_releases() -> None:
    async def body() -> None:
        pipeline = Pipeline("downstream")
        _add(pipeline, "latency", latency=60_000)
        _feed(pipeline, Chunk(b"x", time.monotonic()))
        await _settle()
        _add(pipeline, "timeout")  # drops data
        pipeline.remove(pipeline.stages[0])
        await _settle()
        assert _drain(pipeline) == []
        assert pipeline.budget.bytes == 0 and pipeline.budget.chunks == 0
        pipeline.stop()

    _run(body)


def test_slow_close_passes_data_and_holds_only_the_end() -> None:
    async def body() -> None:
        pipeline = Pipeline("downstream")
        _add(pipeline, "slow_close", delay=60_000)
        _feed(pipeline, Chunk(b"data", 0.0), EOF)
        await _settle()
        assert _drain(pipeline) == [Chunk(b"data", 0.0)]
        pipeline.remove(pipeline.stages[0])  # removing the toxic lets the close through
        await _settle()
        assert _drain(pipeline) == [EOF]

    _run(body)


def test_limit_data_passes_exactly_n_bytes_then_ends_the_stream_and_returns_the_budget() -> None:
    async def body() -> None:
        pipeline = Pipeline("upstream")
        _add(pipeline, "limit_data", bytes=5)
        _feed(pipeline, Chunk(b"abc", 0.0), Chunk(b"defg", 0.0), Chunk(b"hij", 0.0))
        await _settle()
        out = _drain(pipeline)
        assert out == [Chunk(b"abc", 0.0), Chunk(b"de", 0.0), End("limit_data", "limit_data0")]
        # what was dropped is given back; what was passed is the writer's to give back
        assert pipeline.budget.bytes == 5 and pipeline.budget.chunks == 2
        pipeline.stop()

    _run(body)


def test_updating_limit_data_keeps_the_count_of_bytes_already_passed() -> None:
    async def body() -> None:
        pipeline = Pipeline("upstream")
        _add(pipeline, "limit_data", bytes=10)
        _feed(pipeline, Chunk(b"123456", 0.0))
        await _settle()
        old = pipeline.stages[0]
        toxic = validate_toxic("limit_data", {"bytes": 8}, name=old.toxic.name)
        pipeline.replace(old, make_stage(pipeline, toxic, True, random.Random(1), replaces=old))
        _feed(pipeline, Chunk(b"7890", 0.0))
        await _settle()
        assert _drain(pipeline) == [
            Chunk(b"123456", 0.0),
            Chunk(b"78", 0.0),
            End("limit_data", old.toxic.name),
        ]
        pipeline.stop()

    _run(body)


def test_a_replaced_stage_hands_on_its_held_chunk_and_keeps_its_place() -> None:
    async def body() -> None:
        pipeline = Pipeline("downstream")
        _add(pipeline, "latency", latency=60_000)
        _add(pipeline, "noop")
        t = time.monotonic()
        _feed(pipeline, Chunk(b"held", t), Chunk(b"queued", t))
        await _settle()
        old = pipeline.stages[0]
        toxic = validate_toxic("latency", {"latency": 120_000}, name=old.toxic.name)
        new = make_stage(pipeline, toxic, True, random.Random(1), replaces=old)
        pipeline.replace(old, new)
        await _settle()
        assert _drain(pipeline) == [Chunk(b"held", t)]  # the queued one waits in the new
        assert pipeline.stages[0] is new and new.held == Chunk(b"queued", t)
        pipeline.stop()

    _run(body)


def test_the_budget_stops_the_reader_when_bytes_or_chunks_are_spent() -> None:
    async def body() -> None:
        budget = Budget(max_bytes=10, max_chunks=3)
        await asyncio.wait_for(budget.wait(), 1)
        budget.take(6)
        budget.take(4)  # 10 bytes: full
        waiter = asyncio.ensure_future(budget.wait())
        await _settle()
        assert not waiter.done()
        budget.give(4)
        await _settle()
        assert waiter.done()
        budget.take(1)
        budget.split()  # 3 chunks: full
        assert not budget._room.is_set()
        budget.give(1)
        assert budget._room.is_set()

    _run(body)


def test_every_toxic_type_names_exactly_one_stage_class() -> None:
    assert set(STAGES) == set(TOXIC_TYPES)
    named = [name for cls in {*STAGES.values()} for name in cls.toxic_types]
    assert sorted(named) == sorted(TOXIC_TYPES)
    assert STAGES["noop"] is Stage and STAGES["reset_peer"] is Stage
