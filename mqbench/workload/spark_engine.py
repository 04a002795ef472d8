"""Load generation as a Spark barrier stage (``generator.engine: spark``, docs/distributed.md).

The driver (``mqbench run``) starts brokers and faults as always; the cell's client shards
(``WorkerPlan``s, one per task, a publisher and all of its subscribers in one task) run as
the tasks of one barrier stage (``rdd.barrier().mapPartitions``). Each task:

1. measures its clock offset to the driver (``workload.clock``, min-RTT probes),
2. connects back to the driver's control listener and says hello,
3. runs the ordinary worker (``workload.worker.run_worker``) over a local pipe, relayed to
   the driver, so the driver's ``Coordinator`` runs the cell exactly as for local workers;
   when its clients are connected the task waits at ``BarrierTaskContext.barrier()``
   before it reports ready, and the driver then sends one common start time,
4. measures its clock offset again and returns its ``WorkerStats`` and clocks.

PySpark is imported only inside functions: a run without ``engine: spark`` never starts
a JVM. A task's worker writes its records into a staging folder on the executor; the
task ships what was flushed to the driver over the same authenticated control connection
(``records.transfer``) and the driver appends it to the cell folder: no storage is shared.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from mqbench.brokers.resources.sampler import ProcessLike, Sample
from mqbench.endpoint import Endpoint
from mqbench.errors import ClockError, LoadTaskLost, MqbenchError, TransportError
from mqbench.process.jvm_temp import spark_temp_conf
from mqbench.records.clocks import ClockOffset, GeneratorClocks, TaskClock
from mqbench.records.transfer import RecordSink, StagingReader
from mqbench.records.worker_stats import WorkerStats
from mqbench.workload.clock import TimeService, measure_offset
from mqbench.workload.coordinator import WorkerHandle
from mqbench.workload.distributed import check_clock_bound
from mqbench.workload.messages import (
    Done,
    Failed,
    Ready,
    RecordsShipped,
    RecordWriteFailed,
    Stop,
    TaskHello,
    TaskMessage,
    TaskSample,
)
from mqbench.workload.plan import WorkerPlan
from mqbench.workload.worker import raise_open_files_limit, run_worker

STAGE_START_S = 180.0
"""How long the stage may take until every task said hello (executors start Python)."""
EXECUTORS_WAIT_S = 120.0
"""How long to wait for the cluster's executors to register before submitting the stage."""
SAMPLE_INTERVAL_S = 1.0
"""How often a task samples its own CPU and RSS (as the driver's resource sampler does)."""
SHIP_INTERVAL_S = 0.5
"""How often a task sends the records its worker flushed (it flushes at least once a second)."""
STALE_SAMPLE_S = 2.5
"""A task's CPU/RSS sample older than this is not counted (the task stopped reporting)."""
STAGE_END_S = 30.0
"""After the cell, how long the stage may take to return before it is cancelled."""

SESSION_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.python.worker.reuse": "false",
    # A load stage runs once: a task that failed has already put load on the broker and
    # written records; a retry would mix two runs in one cell.
    "spark.task.maxFailures": "1",
    "spark.stage.maxConsecutiveAttempts": "1",
}
"""Session settings for load; ``generator.spark_conf`` overrides them."""


@dataclass(frozen=True)
class TaskSetup:
    """What every task needs to reach the driver (shipped inside the stage's closure)."""

    control: Endpoint
    authkey: bytes
    time: Endpoint


@dataclass(frozen=True)
class TaskResult:
    """What a task returns to the driver: its final shard stats and its clocks."""

    task: int
    stats: WorkerStats | None
    clock: TaskClock


# -- executor side ---------------------------------------------------------------------


def run_task(
    setup: TaskSetup, plans: list[WorkerPlan], _rows: Iterable[int]
) -> Iterator[TaskResult]:
    """The body of one barrier task (``mapPartitions``): run plan ``partitionId()``."""
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    if ctx.attemptNumber() > 0:
        raise MqbenchError("a load stage runs once: a retried attempt is refused")
    index = ctx.partitionId()
    yield run_shard(plans[index], setup, ctx.barrier)


def run_shard(
    plan: WorkerPlan,
    setup: TaskSetup,
    barrier: Callable[[], object],
    clock: Callable[[], int] = time.time_ns,
) -> TaskResult:
    """Measure the clock, run ``plan`` relayed to the driver, measure again.

    ``barrier`` is called once this shard's clients are connected, before it reports
    ready (``BarrierTaskContext.barrier`` in a Spark task).
    """
    raise_open_files_limit()
    before = measure_offset(setup.time, clock=clock)
    host = socket.gethostname()
    try:
        driver = Client((setup.control.host, setup.control.port), authkey=setup.authkey)
    except OSError as exc:
        raise TransportError(
            f"task {plan.worker} cannot reach the driver at "
            f"{setup.control.host}:{setup.control.port}: {exc.strerror or exc}"
        ) from None
    send_lock = threading.Lock()

    def to_driver(message: TaskHello | TaskMessage) -> None:
        with send_lock:
            driver.send(message)

    to_driver(TaskHello(plan.worker, host, os.getpid(), before))
    staging = Path(tempfile.mkdtemp(prefix=f"mqbench-task-{plan.worker}-", dir=_local_dir()))
    try:
        sampler = SelfSampler(plan.worker, host)
        shipper = RecordShipper(StagingReader(staging), to_driver, sampler=sampler)
        stats, released = _relay(
            replace(plan, cell_dir=str(staging)), driver, to_driver, shipper, barrier, clock
        )
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    after: ClockOffset | None = None
    with contextlib.suppress(TransportError):
        after = measure_offset(setup.time, clock=clock)
    driver.close()
    barrier_ns = released[0] - before.offset_ns if released else None
    task_clock = TaskClock(plan.worker, host, os.getpid(), before, after, barrier_ns)
    return TaskResult(plan.worker, stats, task_clock)


def _local_dir() -> str | None:
    """The executor's first Spark local directory (``SPARK_LOCAL_DIRS``, which PySpark
    sets for its workers), else the temporary folder: Spark removes what a dead executor
    left there (``spark.storage.cleanupFilesAfterExecutorExit``, a cluster manager's app
    directories)."""
    first = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0]
    return first if first and os.path.isdir(first) else None


def _relay(
    plan: WorkerPlan,
    driver: Connection,
    to_driver: Callable[[TaskMessage], None],
    shipper: RecordShipper,
    barrier: Callable[[], object],
    clock: Callable[[], int],
) -> tuple[WorkerStats | None, list[int]]:
    """Run the worker over a local pipe relayed to the driver, shipping its records."""
    ours, theirs = _pipe()
    released: list[int] = []

    def up() -> None:  # worker -> driver; waits at the barrier before Ready
        while True:
            try:
                message = ours.recv()
            except (EOFError, OSError):
                return
            if isinstance(message, Ready) and not released:
                barrier()
                released.append(clock())
            if isinstance(message, Done | Failed | RecordWriteFailed):
                shipper.finish()  # the closed files reach the driver before the last word
            with contextlib.suppress(OSError):
                to_driver(message)

    def down() -> None:  # driver -> worker; a lost driver means stop
        while True:
            try:
                message = driver.recv()
            except (EOFError, OSError):
                with contextlib.suppress(OSError):
                    ours.send(Stop())
                return
            with contextlib.suppress(OSError):
                ours.send(message)

    relay_up = threading.Thread(target=up, name="mqbench-relay-up", daemon=True)
    relay_down = threading.Thread(target=down, name="mqbench-relay-down", daemon=True)
    relay_up.start()
    relay_down.start()
    shipper.start()
    try:
        stats = run_worker(plan, theirs)
        relay_up.join()  # every message, "done" included, reached the driver
    finally:
        shipper.finish()
        ours.close()
    return stats, released


class SelfSampler:
    """A task's own process: CPU cores and RSS at most every ``interval_s`` (psutil).

    The first call takes the baseline; later calls return a :class:`TaskSample` once
    ``interval_s`` has passed since the previous one (None before).
    """

    def __init__(
        self,
        task: int,
        host: str,
        process: ProcessLike | None = None,
        interval_s: float = SAMPLE_INTERVAL_S,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        import psutil

        self.task = task
        self.host = host
        self.process: ProcessLike = process if process is not None else psutil.Process()
        self.interval_ns = int(interval_s * 1e9)
        self._monotonic_ns = monotonic_ns
        self._prev: tuple[int, float] | None = None

    def sample(self) -> TaskSample | None:
        """A sample when the interval has passed since the previous one, else None."""
        now = self._monotonic_ns()
        if self._prev is not None and now - self._prev[0] < self.interval_ns:
            return None
        try:
            times = self.process.cpu_times()
            rss = int(self.process.memory_info().rss)
        except Exception:  # psutil errors: no sample this time
            return None
        cpu = float(times.user + times.system)
        prev, self._prev = self._prev, (now, cpu)
        if prev is None:
            return None
        cores = (cpu - prev[1]) / ((now - prev[0]) / 1e9)
        return TaskSample(self.task, self.host, self.process.pid, cores, rss)


class RecordShipper:
    """A thread that sends what the worker flushed to the driver every ``interval_s``.

    It runs beside the worker's event loop (never on it), so shipping does not disturb
    send timing; with a ``sampler`` it also sends the task's CPU/RSS samples (1 Hz).
    ``finish`` stops the thread and ships what is left (the closed files).
    """

    def __init__(
        self,
        reader: StagingReader,
        send: Callable[[TaskMessage], None],
        interval_s: float = SHIP_INTERVAL_S,
        sampler: SelfSampler | None = None,
    ) -> None:
        self.reader = reader
        self.send = send
        self.interval_s = interval_s
        self.sampler = sampler
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="mqbench-shipper", daemon=True)
        self.broken = False
        """The driver's connection failed: nothing more is shipped."""

    def start(self) -> None:
        """Start shipping in the background."""
        self._thread.start()

    def _run(self) -> None:
        if self.sampler is not None:
            self.sampler.sample()  # the baseline
        while not self._stop.wait(self.interval_s):
            self.ship()
            sample = self.sampler.sample() if self.sampler is not None else None
            if sample is not None and not self.broken:
                try:
                    self.send(sample)
                except OSError:
                    self.broken = True

    def ship(self) -> None:
        """Send everything new now (one caller at a time)."""
        with self._lock:
            if self.broken:
                return
            try:
                for item in self.reader.new():
                    self.send(RecordsShipped(item))
            except OSError:
                self.broken = True

    def finish(self) -> None:
        """Stop the thread and ship what is left; safe to call twice."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        self.ship()


def _pipe() -> tuple[Connection, Connection]:
    import multiprocessing

    return multiprocessing.Pipe(duplex=True)


# -- driver side -----------------------------------------------------------------------


class SparkTaskHandle(WorkerHandle):
    """The driver's side of one task: the control connection it opened."""

    def __init__(self, plan: WorkerPlan, conn: Connection, hello: TaskHello) -> None:
        super().__init__(plan, conn)
        self.hello = hello
        self.sink = RecordSink(Path(plan.cell_dir), plan.worker)
        self.latest: tuple[float, TaskSample] | None = None
        """When the task's last CPU/RSS sample arrived (monotonic s) and the sample."""

    def receive(self, message: object) -> bool:
        """Records the task shipped go to the cell folder; its samples are kept."""
        match message:
            case TaskSample():
                self.latest = (time.monotonic(), message)
            case RecordsShipped(item):
                self.sink.accept(item)
            case _:
                return False
        return True

    @property
    def pid(self) -> int | None:
        """The task's Python process when it runs on this machine (for the sampler)."""
        return self.hello.pid if self.hello.host == socket.gethostname() else None

    def kill(self) -> None:
        """Close the control connection: the task stops and flushes."""
        self.conn.close()

    def lost(self) -> MqbenchError:
        """The task's connection ended before it finished."""
        return LoadTaskLost(
            f"Spark task {self.plan.worker} on {self.hello.host} (pid {self.hello.pid}) lost "
            "its connection before it finished: its executor died or the task was killed; "
            "records written so far are kept",
            self.plan.worker,
        )


class SparkStage:
    """A ``Launcher`` that runs a cell's plans as one Spark barrier stage."""

    def __init__(
        self,
        *,
        master: str,
        conf: dict[str, str],
        bind_host: str,
        max_clock_error_ns: int | None,
        crossing_routes: int,
    ) -> None:
        self.master = master
        self.conf = conf
        self.bind_host = bind_host
        self.max_clock_error_ns = max_clock_error_ns
        self.crossing_routes = crossing_routes
        self._hellos: dict[int, TaskHello] = {}
        self._handles: list[SparkTaskHandle] = []
        self._results: list[TaskResult] | None = None
        self._stage_error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._group = f"mqbench-load-{secrets.token_hex(4)}"
        self._time: TimeService | None = None
        self._listener: Listener | None = None
        self._sc: Any = None

    def launch(self, plans: list[WorkerPlan], register: Callable[[WorkerHandle], None]) -> None:
        """Submit the stage and register each task as it says hello (all or an error)."""
        self._sc = spark_context(self.master, self.conf, self.bind_host)
        wait_for_executors(self._sc, self.master, len(plans))
        self._time = TimeService(self.bind_host)
        authkey = secrets.token_bytes(32)
        self._listener = Listener((self.bind_host, 0), authkey=authkey)
        host, port = self._listener.address
        setup = TaskSetup(Endpoint(str(host), int(port)), authkey, self._time.endpoint)
        accepted: queue.Queue[Connection] = queue.Queue()
        threading.Thread(target=self._accept, args=(accepted,), daemon=True).start()
        body = functools.partial(run_task, setup, plans)
        self._thread = threading.Thread(
            target=self._run_stage, args=(body, len(plans)), name="mqbench-stage", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + STAGE_START_S
        while len(self._hellos) < len(plans):
            if not self._thread.is_alive():
                raise MqbenchError(f"the Spark load stage ended before it started: {self._why()}")
            if time.monotonic() > deadline:
                raise MqbenchError(
                    f"only {len(self._hellos)} of {len(plans)} Spark tasks reached the driver "
                    f"within {STAGE_START_S:.0f} s"
                )
            try:
                conn = accepted.get(timeout=0.25)
            except queue.Empty:
                continue
            try:
                hello = conn.recv() if conn.poll(10) else None
            except (EOFError, OSError):
                hello = None
            if not isinstance(hello, TaskHello):
                conn.close()
                continue
            self._hellos[hello.task] = hello
            handle = SparkTaskHandle(plans[hello.task], conn, hello)
            self._handles.append(handle)
            register(handle)
        if self.crossing_routes and self.max_clock_error_ns is not None:
            check_clock_bound([h.before for h in self._hellos.values()], self.max_clock_error_ns)

    def _accept(self, accepted: queue.Queue[Connection]) -> None:
        listener = self._listener
        assert listener is not None
        while True:
            try:
                accepted.put(listener.accept())
            except (OSError, EOFError):
                return
            except Exception:  # a stranger failing authentication
                continue

    def _run_stage(self, body: Callable[[Iterable[int]], Iterator[TaskResult]], n: int) -> None:
        sc = self._sc
        try:
            sc.setJobGroup(self._group, "mqbench load", interruptOnCancel=True)
            rdd = sc.parallelize(range(n), n).barrier().mapPartitions(body)
            self._results = list(rdd.collect())
        except Exception as exc:  # reported by launch/finish as one line
            self._stage_error = exc

    def _why(self) -> str:
        return one_line(self._stage_error) if self._stage_error else "no error reported"

    def finish(self) -> None:
        """Wait for the stage to return (cancel it if it does not), stop the services."""
        try:
            if self._thread is not None:
                self._thread.join(STAGE_END_S)
                if self._thread.is_alive() and self._sc is not None:
                    self._sc.cancelJobGroup(self._group)
                    self._thread.join(STAGE_END_S)
        finally:
            for handle in self._handles:
                handle.sink.close()
            if self._listener is not None:
                self._listener.close()
            if self._time is not None:
                self._time.close()

    def sample(self, t_ns: int) -> list[Sample]:
        """The tasks' latest CPU/RSS samples as ``resources.csv`` rows (a ``SampleSource``).

        One ``generator`` row summing every task that reported within the last
        ``STALE_SAMPLE_S``, like the local generator's row, and one
        ``generator:task-N@host`` row per task.
        """
        now = time.monotonic()
        fresh = [
            sample
            for handle in self._handles
            if handle.latest is not None and now - handle.latest[0] <= STALE_SAMPLE_S
            for sample in (handle.latest[1],)
        ]
        if not fresh:
            return []
        rows = [
            Sample(
                t_ns,
                "generator",
                fresh[0].pid,
                sum(s.cpu_cores for s in fresh),
                sum(s.rss_bytes for s in fresh),
            )
        ]
        for s in sorted(fresh, key=lambda s: s.task):
            rows.append(
                Sample(t_ns, f"generator:task-{s.task}@{s.host}", s.pid, s.cpu_cores, s.rss_bytes)
            )
        return rows

    def clocks(self) -> GeneratorClocks:
        """Per task: clock offsets before/after and the barrier exit (the manifest entry)."""
        by_task = {r.task: r.clock for r in self._results or []}
        tasks = []
        for task, hello in sorted(self._hellos.items()):
            tasks.append(
                by_task.get(task)
                or TaskClock(task, hello.host, hello.pid, hello.before, None, None)
            )
        return GeneratorClocks(
            engine="spark",
            master=self.master,
            tasks=tuple(tasks),
            cross_task_routes=self.crossing_routes,
            latency_error_ns=(self.max_clock_error_ns or 0) if self.crossing_routes else 0,
        )

    def after_drift_error(self) -> ClockError | None:
        """A ``ClockError`` when the offsets measured after the run break the bound."""
        if not self.crossing_routes or self.max_clock_error_ns is None:
            return None
        after = [r.clock.after for r in self._results or [] if r.clock.after is not None]
        try:
            check_clock_bound(after, self.max_clock_error_ns)
        except ClockError as exc:
            return exc
        return None


def spark_context(master: str, conf: dict[str, str], bind_host: str) -> Any:
    """The running SparkContext for ``master``, or a new one (PySpark imported here)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    active = SparkContext._active_spark_context
    if active is not None:
        if active.master != master:
            raise MqbenchError(
                f"a SparkContext for {active.master!r} already runs in this process; "
                f"generator.master is {master!r}"
            )
        return active
    builder = SparkSession.builder.master(master).appName("mqbench-load")
    settings = {
        **SESSION_CONF,
        "spark.driver.host": bind_host,
        "spark.driver.bindAddress": bind_host,
        "spark.pyspark.python": sys.executable,
        **conf,
    }
    # The JVMs' temporary files (lz4-java's library, Spark's scratch folders) go to a
    # folder of this process, removed when it exits (mqbench.process.jvm_temp).
    settings = spark_temp_conf(settings, master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    # PySpark ships the Python of PYSPARK_PYTHON to the executors with every task: by
    # default this interpreter (the one with mqbench installed), unless the user chose one.
    os.environ.setdefault("PYSPARK_PYTHON", settings["spark.pyspark.python"])
    try:
        return builder.getOrCreate().sparkContext
    except Exception as exc:  # Py4J/JVM start-up errors, as one line
        raise MqbenchError(f"cannot start Spark for {master!r}: {one_line(exc)}") from None


def spark_running() -> bool:
    """Whether this process already has a SparkContext (then a run leaves it running)."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def stop_spark() -> None:
    """Stop this process's SparkContext, if one runs (the end of a distributed run)."""
    from pyspark import SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()


def wait_for_executors(sc: Any, master: str, needed: int) -> None:
    """Wait until the cluster has ``needed`` executors (a barrier stage needs all slots)."""
    if master.startswith("local[") or master == "local":
        return  # one JVM: the driver runs the tasks
    deadline = time.monotonic() + EXECUTORS_WAIT_S
    while True:
        have = int(sc._jsc.sc().getExecutorMemoryStatus().size()) - 1  # minus the driver
        if have >= needed:
            return
        if time.monotonic() > deadline:
            raise MqbenchError(
                f"the Spark cluster at {master} has {have} executor(s) after "
                f"{EXECUTORS_WAIT_S:.0f} s; generator.executors is {needed}"
            )
        time.sleep(0.5)


def one_line(exc: BaseException) -> str:
    """The line of a (Py4J) Spark failure that says why, e.g. the task's mqbench error."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("mqbench.errors."):
            return line.partition(": ")[2] or line
    for line in lines:
        if "Job aborted" in line or "Exception:" in line:
            return line[:300]
    return (lines[0] if lines else type(exc).__name__)[:300]
