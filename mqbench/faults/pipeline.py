"""One stream of a proxied connection as Toxiproxy runs it: a pipeline of toxic stages.

A reader puts ``Chunk``s (bytes + the time they were read) into the pipeline; every toxic of
the stream is one ``Stage`` with its own inbox and task, in the order the toxics were added;
the last stage feeds the ``sink`` that the writer drains to the other socket. A stage works
on one item at a time, so a latency stage that sleeps holds the chunks behind it, and two
latency stages in a row add their delays. The end of the stream travels down the pipeline
as an ``End`` item after the last chunk: the source's EOF (passed on as a half-close) or a
toxic closing the connection (``limit_data``); ``slow_close`` holds it back.

Stages are added at the end, replaced in place (a toxic update) and removed while data
flows. A removed or replaced stage hands the item it holds and its inbox to the stage after
it at once and in order (Toxiproxy interrupts the stage and flushes it), so no data is lost
or reordered. Memory is bounded by a ``Budget`` of bytes and chunks in flight per stream:
the reader waits while it is spent; the writer, and stages that drop data, give it back.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final

from mqbench.faults.toxics import (
    BandwidthPacer,
    LatencyDraw,
    LimitCounter,
    Toxic,
    latency_step,
)

BUDGET_BYTES: Final = 16 * 1024 * 1024
"""Bytes in flight per stream (read, not yet written or dropped) before the reader waits."""
BUDGET_CHUNKS: Final = 65536
"""Chunks in flight per stream before the reader waits (bounds the per-chunk overhead)."""


@dataclass
class Chunk:
    """Bytes read from one socket, with Toxiproxy's timestamp (monotonic seconds)."""

    data: bytes
    stamp: float


@dataclass(frozen=True)
class End:
    """The end of a stream: ``reason="eof"`` (the source closed) or a toxic closing it."""

    reason: str
    toxic: str | None = None


Item = Chunk | End
"""What flows through a pipeline."""

EOF: Final = End("eof")
"""The source sent EOF."""


class Budget:
    """Bytes and chunks in flight on one stream; the reader waits while either is spent."""

    def __init__(self, max_bytes: int = BUDGET_BYTES, max_chunks: int = BUDGET_CHUNKS) -> None:
        """Allow ``max_bytes`` bytes in ``max_chunks`` chunks in flight."""
        self.max_bytes = max_bytes
        self.max_chunks = max_chunks
        self.bytes = 0
        self.chunks = 0
        self._room = asyncio.Event()
        self._room.set()

    def take(self, nbytes: int) -> None:
        """Count a chunk of ``nbytes`` read into the pipeline."""
        self.bytes += nbytes
        self.chunks += 1
        self._update()

    def split(self) -> None:
        """Count one more chunk for the same bytes (a chunk was cut in two)."""
        self.chunks += 1
        self._update()

    def give(self, nbytes: int, chunks: int = 1) -> None:
        """Count ``nbytes`` in ``chunks`` chunks as written or dropped."""
        self.bytes -= nbytes
        self.chunks -= chunks
        self._update()

    def _update(self) -> None:
        if self.bytes < self.max_bytes and self.chunks < self.max_chunks:
            self._room.set()
        else:
            self._room.clear()

    async def wait(self) -> None:
        """Return once there is room for another chunk."""
        await self._room.wait()


class Stage:
    """One toxic on one stream of one connection; the base class passes items unchanged.

    ``affected`` is the toxicity roll: an unaffected stage behaves as a noop (Toxiproxy runs
    its noop toxic on the stub instead). Each stage class names the toxic types it runs
    (``toxic_types``); ``STAGES`` maps every type of ``toxics.TOXIC_TYPES`` to its class.
    """

    toxic_types: ClassVar[tuple[str, ...]] = ("noop", "reset_peer")
    """``reset_peer``'s timer is the link's (``Link``); on the stream it passes data."""

    @classmethod
    def create(
        cls,
        pipeline: Pipeline,
        toxic: Toxic,
        affected: bool,
        rng: random.Random,
        replaces: Stage | None,
    ) -> Stage:
        """The stage for ``toxic`` (``replaces``: the stage of the same toxic before an
        update; ``rng``: the proxy's seeded random source)."""
        return cls(pipeline, toxic, affected)

    def __init__(self, pipeline: Pipeline, toxic: Toxic, affected: bool) -> None:
        """Prepare the stage; ``Pipeline.append`` / ``replace`` start it."""
        self.pipeline = pipeline
        self.toxic = toxic
        self.affected = affected
        self.inbox: asyncio.Queue[Item] = asyncio.Queue()
        self.held: Item | None = None
        """The item being worked on (handed on by ``Pipeline.remove`` / ``replace``)."""
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start working on the inbox."""
        self.task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        """Stop at once (the held item stays in ``held``)."""
        if self.task is not None:
            self.task.cancel()

    async def _run(self) -> None:
        while True:
            item = await self.inbox.get()
            self.held = item
            if self.affected:
                await self.process(item)
            else:
                self.emit(item)
            self.held = None

    def emit(self, item: Item) -> None:
        """Hand ``item`` to the next stage (or the sink)."""
        self.pipeline.after(self).put_nowait(item)

    async def process(self, item: Item) -> None:
        """Work on one item; the base class passes it on (``noop``, ``reset_peer``)."""
        self.emit(item)


class LatencyStage(Stage):
    """Delays every chunk as Toxiproxy's latency toxic does (see ``latency_step``)."""

    toxic_types = ("latency",)

    @classmethod
    def create(
        cls,
        pipeline: Pipeline,
        toxic: Toxic,
        affected: bool,
        rng: random.Random,
        replaces: Stage | None,
    ) -> Stage:
        """A latency stage drawing its jitter from ``rng``."""
        return cls(pipeline, toxic, affected, rng)

    def __init__(
        self, pipeline: Pipeline, toxic: Toxic, affected: bool, rng: random.Random
    ) -> None:
        """Delay by the toxic's ``latency`` +/- ``jitter`` ms, drawn with ``rng``."""
        super().__init__(pipeline, toxic, affected)
        self.draw = LatencyDraw(toxic.attr("latency"), toxic.attr("jitter"), rng)

    async def process(self, item: Item) -> None:
        """Sleep for what is left of the chunk's delay, advance its stamp, pass it on."""
        if isinstance(item, Chunk):
            sleep, stamp = latency_step(self.draw.delay_s(), item.stamp, time.monotonic())
            if sleep > 0:
                await asyncio.sleep(sleep)
            item.stamp = stamp
        self.emit(item)


class BandwidthStage(Stage):
    """Paces the stream to the toxic's ``rate`` (pieces of at most 20 ms, see the pacer)."""

    toxic_types = ("bandwidth",)

    def __init__(self, pipeline: Pipeline, toxic: Toxic, affected: bool) -> None:
        """Limit to the toxic's ``rate`` KB/s."""
        super().__init__(pipeline, toxic, affected)
        self.pacer = BandwidthPacer(toxic.attr("rate"))

    async def process(self, item: Item) -> None:
        """Pass a chunk on in paced pieces (all at once when the rate is 0)."""
        if not isinstance(item, Chunk) or self.pacer.unlimited:
            self.emit(item)
            return
        offset = 0
        for piece in self.pacer.pieces(item.data):
            wait = self.pacer.slot(len(piece), time.monotonic()) - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            offset += len(piece)
            if offset < len(item.data):
                self.held = Chunk(item.data[offset:], item.stamp)
                self.pipeline.budget.split()
            else:
                self.held = None
            self.emit(Chunk(piece, item.stamp))


class SlowCloseStage(Stage):
    """Passes data; holds the end of the stream for the toxic's ``delay`` ms."""

    toxic_types = ("slow_close",)

    async def process(self, item: Item) -> None:
        """Pass a chunk on; pass the end on ``delay`` ms later."""
        if isinstance(item, End):
            await asyncio.sleep(self.toxic.attr("delay") / 1000.0)
        self.emit(item)


class TimeoutStage(Stage):
    """Drops the stream's data (the connection-level timer closes it, see ``Link``)."""

    toxic_types = ("timeout",)

    async def process(self, item: Item) -> None:
        """Drop a chunk; pass the end on."""
        if isinstance(item, Chunk):
            self.pipeline.budget.give(len(item.data))
        else:
            self.emit(item)


class LimitDataStage(Stage):
    """Passes ``bytes`` bytes of the stream, then ends it with a close of the connection."""

    toxic_types = ("limit_data",)

    @classmethod
    def create(
        cls,
        pipeline: Pipeline,
        toxic: Toxic,
        affected: bool,
        rng: random.Random,
        replaces: Stage | None,
    ) -> Stage:
        """A limit that goes on counting from the stage it replaces (an update)."""
        previous = replaces.counter if isinstance(replaces, LimitDataStage) else None
        return cls(pipeline, toxic, affected, previous)

    def __init__(
        self, pipeline: Pipeline, toxic: Toxic, affected: bool, counter: LimitCounter | None
    ) -> None:
        """Count from ``counter`` (kept across an update of the toxic) or from zero."""
        super().__init__(pipeline, toxic, affected)
        self.counter = LimitCounter(toxic.attr("bytes"))
        if counter is not None:
            self.counter.passed = counter.passed
        self.closed = False

    async def process(self, item: Item) -> None:
        """Pass what the limit allows; at the limit, pass an ``End`` and drop the rest."""
        if not isinstance(item, Chunk):
            self.emit(item)
            return
        if self.closed:
            self.pipeline.budget.give(len(item.data))
            return
        data, reached = self.counter.take(item.data)
        dropped = len(item.data) - len(data)
        if data:
            self.emit(Chunk(data, item.stamp))
            if dropped:
                self.pipeline.budget.give(dropped, chunks=0)
        else:
            self.pipeline.budget.give(dropped)
        if reached:
            self.closed = True
            self.emit(End("limit_data", self.toxic.name))


def make_stage(
    pipeline: Pipeline,
    toxic: Toxic,
    affected: bool,
    rng: random.Random,
    replaces: Stage | None = None,
) -> Stage:
    """The stage for ``toxic`` (``replaces``: the stage of the same toxic before an update)."""
    return STAGES[toxic.type].create(pipeline, toxic, affected, rng, replaces)


STAGES: Mapping[str, type[Stage]] = {
    name: cls
    for cls in (Stage, LatencyStage, BandwidthStage, SlowCloseStage, TimeoutStage, LimitDataStage)
    for name in cls.toxic_types
}
"""The stage class of every toxic type (each class names its types)."""


class Pipeline:
    """The stages of one stream, in order, and the sink the writer drains."""

    def __init__(self, stream: str, budget: Budget | None = None) -> None:
        """An empty pipeline (reader -> sink) for ``stream``."""
        self.stream = stream
        self.stages: list[Stage] = []
        self.sink: asyncio.Queue[Item] = asyncio.Queue()
        self.budget = budget if budget is not None else Budget()

    def entry(self) -> asyncio.Queue[Item]:
        """Where the reader puts what it reads."""
        return self.stages[0].inbox if self.stages else self.sink

    def after(self, stage: Stage) -> asyncio.Queue[Item]:
        """The queue that follows ``stage``."""
        i = self.stages.index(stage)
        return self.stages[i + 1].inbox if i + 1 < len(self.stages) else self.sink

    def append(self, stage: Stage) -> None:
        """Add ``stage`` at the end and start it (Toxiproxy adds new toxics last)."""
        self.stages.append(stage)
        stage.start()

    def replace(self, old: Stage, new: Stage) -> None:
        """Put ``new`` in ``old``'s place; ``old``'s held item goes on, its inbox to ``new``."""
        i = self.stages.index(old)
        old.stop()
        self.stages[i] = new
        if old.held is not None:
            self.after(new).put_nowait(old.held)
            old.held = None
        _move(old.inbox, new.inbox)
        new.start()

    def remove(self, stage: Stage) -> None:
        """Take ``stage`` out; what it holds and what waits in its inbox go on, in order."""
        nxt = self.after(stage)
        stage.stop()
        if stage.held is not None:
            nxt.put_nowait(stage.held)
            stage.held = None
        _move(stage.inbox, nxt)
        self.stages.remove(stage)

    def stop(self) -> None:
        """Stop every stage (the connection is closing)."""
        for stage in self.stages:
            stage.stop()


def _move(src: asyncio.Queue[Item], dst: asyncio.Queue[Item]) -> None:
    while not src.empty():
        dst.put_nowait(src.get_nowait())
