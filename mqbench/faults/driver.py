"""Runs a scenario's fault schedule against a Toxiproxy API (the built-in proxy or a real one).

The engine calls, per cell: ``start(upstream)`` (starts the built-in proxy process when
``proxy: builtin`` and creates one proxy to the broker; targeted clients connect to its
port), ``begin(start_ns)`` when publishing starts (a thread injects and recovers toxics on
schedule, logging ``fault_injected`` / ``fault_recovered`` with timestamps and the affected
clients) and ``stop()`` (stops the thread, removes toxics, saves the proxy's own event log
where it has one, deletes the proxy, stops the built-in proxy process by PID).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mqbench.faults.client import ToxiproxyClient
from mqbench.faults.proxy import ProxyProcess, start_proxy_process
from mqbench.faults.schedule import FaultWindow, exponential_schedule, fixed_schedule
from mqbench.faults.toxics import DOWNSTREAM, UPSTREAM, validate_toxic
from mqbench.records.events import EventKind, EventSink
from mqbench.scenario.model import Faults

STREAMS = {"up": (UPSTREAM,), "down": (DOWNSTREAM,), "both": (UPSTREAM, DOWNSTREAM)}


@dataclass(frozen=True)
class ProxySite:
    """A Toxiproxy started for the cell by someone else, with its own view of the network:
    the docker runtime's Toxiproxy container (``faults.proxy: container``) reaches the
    broker by its service name and listens on a port published on this machine."""

    url: str
    """The Toxiproxy API (published on loopback)."""
    upstream: str
    """The broker as the proxy reaches it (``host:port`` inside its network)."""
    listen: str
    """The proxy's listen address inside its network (``0.0.0.0:<port>``)."""
    port: int
    """The port clients connect to on this machine."""


def check_faults(faults: Faults) -> None:
    """The toxic is known and valid, and a configured Toxiproxy answers (bounded wait)."""
    validate_toxic(faults.type, dict(faults.attributes), stream=DOWNSTREAM)
    if faults.proxy not in ("builtin", "container"):
        ToxiproxyClient(faults.proxy).check()


class FaultDriver:
    """Injects one scenario's faults into one cell."""

    def __init__(
        self,
        faults: Faults,
        *,
        seed: int,
        cell_index: int,
        events: EventSink,
        affected: dict[str, list[int]],
    ) -> None:
        self.faults = faults
        self.seed = faults.schedule.seed if faults.schedule.seed is not None else seed
        self.name = f"mqbench-c{cell_index}"
        self.events = events
        self.affected = affected
        """``{"subscribers": [...], "publishers": [...]}``: indices behind the proxy."""
        self.windows: list[FaultWindow] = []
        self._process: ProxyProcess | None = None
        self._client: ToxiproxyClient | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._active: list[str] = []
        # Validate the toxic before anything starts (unknown attributes, bad values).
        validate_toxic(faults.type, dict(faults.attributes), stream=DOWNSTREAM)

    @property
    def url(self) -> str | None:
        """The Toxiproxy API in use."""
        return self._client.url if self._client else None

    def start(
        self,
        upstream_host: str,
        upstream_port: int,
        listen_host: str = "127.0.0.1",
        site: ProxySite | None = None,
    ) -> int:
        """Start (or reach) the proxy server, create this cell's proxy; return its port.

        The proxy listens on ``listen_host`` (loopback unless the scenario binds the broker
        to another address, so that clients on other machines reach it). With ``site`` (a
        Toxiproxy in a container), its API, upstream and listen address are used instead
        and clients connect to ``site.port``.
        """
        upstream = f"{upstream_host}:{upstream_port}"
        if site is not None:
            self._client = ToxiproxyClient(site.url)
            upstream = site.upstream
        elif self.faults.proxy == "builtin":
            self._process = start_proxy_process(seed=self.seed)
            self._client = ToxiproxyClient(self._process.url)
        else:
            self._client = ToxiproxyClient(self.faults.proxy)
        self._client.check()
        self._client.delete_proxy(self.name, missing_ok=True)
        listen = f"[{listen_host}]:0" if ":" in listen_host else f"{listen_host}:0"
        proxy = self._client.create_proxy(
            self.name, upstream, listen=site.listen if site is not None else listen
        )
        self.events(
            EventKind.FAULT_PROXY_STARTED,
            url=self._client.url,
            builtin=self.faults.proxy == "builtin",
            listen=f"{proxy.listen_host}:{proxy.listen_port}",
            upstream=upstream,
            **({"published_port": site.port} if site is not None else {}),
        )
        return site.port if site is not None else proxy.listen_port

    def plan(self, warmup_s: float, duration_s: float) -> list[FaultWindow]:
        """The fault windows (seconds after the warm-up) for a run of ``duration_s``."""
        schedule = self.faults.schedule
        if schedule.kind == "exponential":
            assert schedule.mttf is not None and schedule.mttr is not None
            return exponential_schedule(schedule.mttf, schedule.mttr, duration_s, self.seed)
        assert schedule.every is not None and schedule.duration is not None
        return fixed_schedule(schedule.every, schedule.duration, duration_s)

    def begin(self, start_ns: int, warmup_s: float, duration_s: float) -> None:
        """Start injecting: fault windows are relative to ``start_ns + warmup``."""
        self.windows = self.plan(warmup_s, duration_s)
        origin = start_ns + int(warmup_s * 1e9)
        self.events(
            EventKind.FAULT_SCHEDULE,
            windows=[[w.start_s, w.end_s] for w in self.windows],
            origin_ns=origin,
            type=self.faults.type,
            target=self.faults.target,
        )
        self._thread = threading.Thread(
            target=self._run, args=(origin,), name="mqbench-faults", daemon=True
        )
        self._thread.start()

    def _sleep_until(self, t_ns: int) -> bool:
        """Wait until ``t_ns``; False when stopped first."""
        while not self._stop.is_set():
            remaining = (t_ns - time.time_ns()) / 1e9
            if remaining <= 0:
                return True
            self._stop.wait(min(remaining, 0.5))
        return False

    def _run(self, origin_ns: int) -> None:
        for k, window in enumerate(self.windows):
            if not self._sleep_until(origin_ns + int(window.start_s * 1e9)):
                return
            try:
                self._inject(k)
            except Exception as exc:  # report in the timeline; the run goes on
                self.events(EventKind.ERROR, message=f"fault {k}: inject failed: {exc}")
                continue
            self._sleep_until(origin_ns + int(window.end_s * 1e9))
            self._recover(k)

    def _inject(self, k: int) -> None:
        assert self._client is not None
        for stream in STREAMS[self.faults.stream]:
            name = f"fault{k}-{stream}"
            self._client.add_toxic(
                self.name,
                self.faults.type,
                dict(self.faults.attributes),
                stream=stream,
                toxicity=self.faults.toxicity,
                name=name,
            )
            self._active.append(name)
        self.events(
            EventKind.FAULT_INJECTED,
            fault=k,
            type=self.faults.type,
            attributes=dict(self.faults.attributes),
            stream=self.faults.stream,
            target=self.faults.target,
            **self.affected,
        )

    def _recover(self, k: int) -> None:
        assert self._client is not None
        errors = []
        for name in list(self._active):
            try:
                self._client.remove_toxic(self.name, name, missing_ok=True)
            except Exception as exc:
                errors.append(f"{name}: {exc}")
            self._active.remove(name)
        self.events(EventKind.FAULT_RECOVERED, fault=k, **({"errors": errors} if errors else {}))

    def stop(self, save_log_to: Path | None = None) -> None:
        """Stop injecting, recover, save the proxy's event log, tear the proxy down."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        client = self._client
        if client is not None:
            if self._active:
                self._recover(-1)
            if save_log_to is not None:
                try:
                    log: Any = client.events(self.name)
                except Exception:
                    log = None
                if log is not None:
                    save_log_to.write_text(json.dumps(log, indent=1) + "\n")
            try:
                client.delete_proxy(self.name, missing_ok=True)
            except Exception as exc:
                self.events(EventKind.WARNING, message=f"could not delete fault proxy: {exc}")
        if self._process is not None:
            self._process.stop()
            self._process = None
