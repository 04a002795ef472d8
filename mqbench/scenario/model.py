"""The scenario file as pydantic models. Unknown keys are rejected (``extra="forbid"``).

Fields that accept a list (targets, payload, pairs, rate, qos) are matrix axes: every
combination becomes one *cell* (see ``matrix.py``).
"""

from __future__ import annotations

import ipaddress
import itertools
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mqbench.records.format import HEADER_SIZE
from mqbench.scenario.gate import Gate
from mqbench.scenario.security import Security, check_secret_options, options_label
from mqbench.scenario.topologies import SIZE_FIELDS, shape_of
from mqbench.scenario.units import parse_duration, parse_size

MAX_PAYLOAD = 1024**3
"""mqbench's own cap (1 GiB). Each protocol's and broker's lower limit is checked per cell
by the pre-flight (``workload.preflight.check_payloads``), which names it."""


class _Strict(BaseModel):
    # strict: a YAML ``true`` is no rate and ``"10"`` no count (lax mode would take them as
    # 1.0 and 10); numbers still fill float fields.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _as_list(value: Any) -> Any:
    return value if isinstance(value, list) else [value]


def _check_unique(values: list[Any], what: str) -> list[Any]:
    if not values:
        raise ValueError(f"{what} must not be empty")
    if len(set(values)) != len(values):
        raise ValueError(f"{what} has duplicate values: {values}")
    return values


Topology = Literal["pairs", "fanout", "fanin", "p2p", "groups"]


class PublisherGroup(_Strict):
    """A group of publishers (topology ``groups``), shaped like tb-mqtt-perf-tests' config."""

    id: str = Field(pattern=r"^[A-Za-z0-9_-]+$")
    count: int = Field(gt=0, le=1_000_000)
    topic_prefix: str = Field(min_length=1, description="publisher j publishes to prefix + j")
    client_id_prefix: str | None = None


class SubscriberGroup(_Strict):
    """A group of subscribers sharing one topic filter (topology ``groups``)."""

    id: str = Field(pattern=r"^[A-Za-z0-9_-]+$")
    count: int = Field(gt=0, le=1_000_000)
    topic_filter: str = Field(min_length=1, description="MQTT syntax: / levels, + and #")
    expected_publisher_groups: list[str] = Field(
        min_length=1, description="publisher groups whose messages this group must receive"
    )
    client_id_prefix: str | None = None
    persistent: bool | None = Field(
        default=None, description="clean_session false; default: workload.persistent"
    )


class Groups(_Strict):
    """Publisher and subscriber groups (topology ``groups``)."""

    publishers: list[PublisherGroup] = Field(min_length=1)
    subscribers: list[SubscriberGroup] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Groups:
        pub_ids = [g.id for g in self.publishers]
        sub_ids = [g.id for g in self.subscribers]
        for ids, what in ((pub_ids, "publisher"), (sub_ids, "subscriber")):
            if len(set(ids)) != len(ids):
                raise ValueError(f"duplicate {what} group ids: {ids}")
        for group in self.subscribers:
            for expected in group.expected_publisher_groups:
                if expected not in pub_ids:
                    raise ValueError(
                        f"subscriber group {group.id!r} expects publisher group {expected!r}, "
                        f"which does not exist (have: {', '.join(pub_ids)})"
                    )
        return self


class Churn(_Strict):
    """Clients that disconnect and reconnect (same client id) during the run."""

    who: Literal["subscribers", "publishers"] = "subscribers"
    every: float = Field(gt=0, description="seconds between disconnects")
    downtime: float = Field(gt=0, description="seconds a client stays away")
    fraction: float = Field(default=1.0, gt=0, le=1.0, description="share of clients each time")
    first_after: float = Field(default=0.0, ge=0, description="seconds after warm-up")

    @field_validator("every", "downtime", "first_after", mode="before")
    @classmethod
    def _parse(cls, value: Any) -> float:
        return parse_duration(value)


class Workload(_Strict):
    """What the generator offers: topology, sizes, rates, QoS and timing."""

    topology: Topology = "pairs"
    pairs: list[Annotated[int, Field(gt=0, le=1_000_000)]] = Field(
        default=[10], description="topologies pairs and p2p: publisher/subscriber pairs"
    )
    subscribers: list[Annotated[int, Field(gt=0, le=1_000_000)]] = Field(
        default=[1], description="topology fanout: subscribers of the one publisher"
    )
    publishers: list[Annotated[int, Field(gt=0, le=1_000_000)]] = Field(
        default=[1], description="topology fanin: publishers into the one subscriber"
    )
    fanin_groups: int = Field(
        default=1, ge=1, description="fanin: publisher groups, one wildcard subscriber each"
    )
    groups: Groups | None = None
    persistent: bool | None = Field(
        default=None,
        description="clean_session false with stable client ids; default true for p2p",
    )
    connect_rate: float = Field(
        default=0.0, ge=0, description="new connections per second (0: as fast as possible)"
    )
    churn: Churn | None = None
    rate: list[Annotated[float, Field(gt=0, le=10_000_000)]] = Field(
        default=[10.0], description="messages per second per publisher"
    )
    payload: list[int] = Field(default=[1024], description="bytes per message, >= 24")
    qos: list[Annotated[int, Field(ge=0, le=2)]] = Field(default=[0])
    duration: float = Field(default=30.0, gt=0, description="measured seconds after warm-up")
    warmup: float = Field(default=5.0, ge=0, description="seconds excluded from the results")
    drain: float = Field(
        default=5.0, ge=0, description="max seconds to wait for in-flight messages at the end"
    )

    @field_validator("pairs", "subscribers", "publishers", "rate", "qos", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        return _as_list(value)

    @field_validator("payload", mode="before")
    @classmethod
    def _parse_payload(cls, value: Any) -> list[int]:
        sizes = [parse_size(v) for v in _as_list(value)]
        for size in sizes:
            if size < HEADER_SIZE:
                raise ValueError(
                    f"payload {size} B is below the {HEADER_SIZE}-byte header every message carries"
                )
            if size > MAX_PAYLOAD:
                raise ValueError(f"payload {size:,} B is above mqbench's largest payload (1 GiB)")
        return sizes

    @field_validator("duration", "warmup", "drain", mode="before")
    @classmethod
    def _parse_duration(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("pairs", "subscribers", "publishers", "rate", "payload", "qos")
    @classmethod
    def _unique(cls, value: list[Any]) -> list[Any]:
        return _check_unique(value, "list")

    @model_validator(mode="after")
    def _topology_fields(self) -> Workload:
        fields = self.model_fields_set
        used = shape_of(self.topology).size_fields
        for name in SIZE_FIELDS:
            if name in fields and name not in used:
                raise ValueError(
                    f"'{name}' does not apply to topology {self.topology!r} "
                    f"(it uses: {', '.join(sorted(used))})"
                )
        if self.topology == "groups" and self.groups is None:
            raise ValueError("topology 'groups' needs a 'groups' section")
        if self.topology == "fanin" and any(p < self.fanin_groups for p in self.publishers):
            raise ValueError(
                f"fanin: every publishers value must be >= fanin_groups ({self.fanin_groups})"
            )
        if self.churn is not None and self.churn.downtime >= self.churn.every:
            raise ValueError("churn.downtime must be shorter than churn.every")
        return self

    @property
    def is_persistent(self) -> bool:
        """Whether clients use persistent sessions (clean_session false)."""
        if self.persistent is not None:
            return self.persistent
        return shape_of(self.topology).persistent_by_default


class Generator(_Strict):
    """How the load generator runs and polices itself."""

    workers: int | Literal["auto"] = Field(
        default="auto", description="worker processes; auto = 1 per 2000 connections, <= cores"
    )
    connect_timeout: float = Field(default=10.0, gt=0)
    max_send_lag_ms: float = Field(
        default=5.0, gt=0, description="send lag p99 above this marks the cell generator_saturated"
    )
    spin_ms: float = Field(
        default=1.0,
        ge=0,
        le=5,
        description="most the publish loop busy-waits before a due send: it arms its timer "
        "at most this much early (adaptive, and within a share of the worker's send period: "
        "5%, or 50 us up to 20%, see docs/scenarios.md); 0 never spins",
    )
    timer: Literal["auto", "timerfd", "loop"] = Field(
        default="auto",
        description="what wakes the publish loop: timerfd (ns deadlines, Linux), loop "
        "(event-loop timers, ~1 ms resolution), auto = timerfd where available",
    )
    layout: Literal["auto", "shared", "split"] = Field(
        default="auto",
        description="shared: a worker runs publishers and subscribers in one event loop; "
        "split: publishers and subscribers run in separate processes, so receive "
        "timestamps never queue behind sends; auto picks per cell (docs/scenarios.md)",
    )
    realtime: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="worker processes run SCHED_FIFO (lowest real-time priority, "
        "/dev/cpu_dma_latency held at 0) where permitted and never at the broker's expense: "
        "on CPUs the broker does not use, or beside an unlimited broker only when the "
        "generator needs little CPU; auto falls back to off with the reason in the manifest, "
        "on refuses to run without it (docs/performance.md)",
    )
    receive_stamp: Literal["kernel", "user"] = Field(
        default="kernel",
        description="what stamps a delivery: kernel = the socket's kernel receive time "
        "(SO_TIMESTAMPNS; the lean clients on plain TCP), user = the worker's clock after it "
        "woke up (TLS connections and the stock clients always); docs/performance.md",
    )
    hot_path: Literal["auto", "python", "compiled"] = Field(
        default="auto",
        description="what runs the publish and receive loop of a worker: compiled = the "
        "compiled core (mqbench_core, built by scripts/install.sh) on the cells it serves "
        "(lean MQTT QoS 0, NATS, Redis; plain TCP; no faults or churn; local engine), "
        "python = the asyncio engine everywhere; auto = compiled where it serves the cell and "
        "is installed, else python; compiled refuses a run with a cell it cannot serve; "
        "each cell's choice and why is in the manifest (docs/performance.md)",
    )
    wakeup_probe: bool = Field(
        default=True,
        description="in cells whose workers run real time, keep a wake-up probe one "
        "real-time priority above them, on their CPUs (about a thousand wake-ups over the "
        "window, one every 2-10 ms), and record the machine's wake-up latency during the "
        "window; the latency verdict allows send lag up to it as the machine's, not the "
        "generator's (docs/calibration.md)",
    )
    coalesce_us: float = Field(
        default=0.0,
        ge=0,
        le=5000,
        description="compiled core: sends due within this many microseconds after the "
        "first due one leave with it, so one wake-up serves them (each is up to this much "
        "later than intended, which send lag shows); 0 sends each at its due time; the "
        "Python engine always does (docs/performance.md)",
    )
    reconnect_max: float = Field(
        default=0.1,
        gt=0,
        le=60,
        description="a lost client retries after 20 ms, doubling up to this (e.g. 100ms); "
        "after a repaired fault it stays away at most this long plus the connect",
    )
    buffer_memory: int = Field(
        default=1024**3,
        gt=0,
        description="bytes all publisher connections of a cell may queue for their sockets "
        "together (e.g. 1GiB); a connection over its share refuses sends (recorded as "
        "failed) instead of growing memory; one second of offered bytes must fit",
    )

    engine: Literal["local", "spark"] = Field(
        default="local",
        description="local: worker processes on this machine; spark: client shards run as the "
        "tasks of one Spark barrier stage (docs/distributed.md)",
    )
    master: str | None = Field(
        default=None,
        description="engine spark: the Spark master URL (spark://, k8s://, local-cluster[...])",
    )
    executors: int = Field(
        default=2, ge=1, description="engine spark: tasks of the stage (one client shard each)"
    )
    max_clock_error_ms: float | None = Field(
        default=None,
        gt=0,
        description="engine spark: accept routes across tasks (two clocks) when every task's "
        "measured clock offset error is within this bound; the bound is added to the "
        "reported latency error",
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict, description="engine spark: extra Spark settings for the session"
    )

    @field_validator("buffer_memory", mode="before")
    @classmethod
    def _parse_size(cls, value: Any) -> int:
        return parse_size(value)

    @property
    def distributed(self) -> bool:
        """The load runs as Spark tasks (``engine: spark``), not as local processes."""
        return self.engine == "spark"

    @model_validator(mode="after")
    def _engine_settings(self) -> Generator:
        if self.engine == "spark" and not self.master:
            raise ValueError("generator.engine spark needs generator.master (a Spark master URL)")
        if self.engine == "local" and self.master is not None:
            raise ValueError("generator.master is set but generator.engine is local (set spark)")
        return self

    @field_validator("workers")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError("workers must be >= 1 or 'auto'")
        return value

    @field_validator("connect_timeout", "reconnect_max", mode="before")
    @classmethod
    def _parse_timeout(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("realtime", mode="before")
    @classmethod
    def _yaml_on_off(cls, value: Any) -> Any:
        # YAML 1.1 reads a bare on/off as a boolean
        if isinstance(value, bool):
            return "on" if value else "off"
        return value


ToxicType = Literal["reset_peer", "timeout", "latency", "bandwidth", "limit_data"]
TOXIC_ATTRIBUTES: dict[str, dict[str, float]] = {
    "reset_peer": {"timeout": 0},
    "timeout": {"timeout": 0},
    "latency": {"latency": 100, "jitter": 0},
    "bandwidth": {"rate": 100},
    "limit_data": {"bytes": 1024},
}
"""Each toxic's attributes with their defaults (Toxiproxy's names and units: ms, KB/s, B)."""


class FaultSchedule(_Strict):
    """When faults happen: exponential up/down times (MTTF/MTTR) or a fixed period."""

    kind: Literal["exponential", "fixed"] = "exponential"
    mttf: float | None = Field(default=None, gt=0, description="exponential: mean time to failure")
    mttr: float | None = Field(default=None, gt=0, description="exponential: mean time to repair")
    every: float | None = Field(default=None, gt=0, description="fixed: period")
    duration: float | None = Field(default=None, gt=0, description="fixed: fault length")
    seed: int | None = Field(default=None, description="default: the scenario seed")

    @field_validator("mttf", "mttr", "every", "duration", mode="before")
    @classmethod
    def _parse(cls, value: Any) -> float | None:
        return None if value is None else parse_duration(value)

    @model_validator(mode="after")
    def _complete(self) -> FaultSchedule:
        if self.kind == "exponential" and (self.mttf is None or self.mttr is None):
            raise ValueError("an exponential fault schedule needs mttf and mttr")
        if self.kind == "fixed":
            if self.every is None or self.duration is None:
                raise ValueError("a fixed fault schedule needs every and duration")
            if self.duration >= self.every:
                raise ValueError("fixed schedule: duration must be shorter than every")
        return self


class Faults(_Strict):
    """Network faults between a group of clients and the broker (Toxiproxy semantics)."""

    type: ToxicType = "reset_peer"
    attributes: dict[str, float] = Field(default_factory=dict)
    stream: Literal["up", "down", "both"] = Field(
        default="down", description="up = client->broker, down = broker->client"
    )
    toxicity: float = Field(default=1.0, gt=0, le=1.0)
    target: str = Field(
        default="subscribers",
        description="subscribers | publishers | all | a subscriber/publisher group id",
    )
    schedule: FaultSchedule
    proxy: str = Field(
        default="builtin",
        description="builtin; container (a Toxiproxy container on the broker's network, "
        "runtime: docker); or the URL of a Toxiproxy API on loopback",
    )

    @model_validator(mode="after")
    def _known_attributes(self) -> Faults:
        known = TOXIC_ATTRIBUTES[self.type]
        for name, value in self.attributes.items():
            if name not in known:
                raise ValueError(
                    f"toxic {self.type!r} has no attribute {name!r} "
                    f"(known: {', '.join(sorted(known))})"
                )
            if value < 0:
                raise ValueError(f"toxic attribute {name!r} must be >= 0, got {value}")
        if self.proxy not in ("builtin", "container"):
            from urllib.parse import urlparse

            host = urlparse(self.proxy).hostname or ""
            if host not in ("localhost", "::1") and not host.startswith("127."):
                raise ValueError(f"faults.proxy {self.proxy!r} is not a loopback URL")
        return self


class SearchStop(_Strict):
    """When a saturation search stops: the first step that crosses any limit."""

    loss_pct: float | None = Field(default=1.0, ge=0)
    p99_ms: float | None = Field(default=None, gt=0)
    generator_saturated: bool = True


class Search(_Strict):
    """Step one axis upwards until the broker (or the generator) cannot keep up."""

    axis: Literal["rate", "pairs", "subscribers", "publishers"]
    values: list[float] = Field(min_length=2, description="increasing steps to try")
    stop: SearchStop = SearchStop()

    @field_validator("values")
    @classmethod
    def _increasing(cls, value: list[float]) -> list[float]:
        if any(b <= a for a, b in itertools.pairwise(value)):
            raise ValueError(f"search values must be strictly increasing, got {value}")
        if any(v <= 0 for v in value):
            raise ValueError("search values must be > 0")
        return value


class BrokerOptions(_Strict):
    """Where and how the broker runs (runtime-specific)."""

    host: str = "127.0.0.1"
    port: int | None = Field(default=None, ge=1, le=65535, description="None: a free port")
    pid: int | None = Field(default=None, gt=0, description="external runtime: a PID to sample")
    startup_timeout: float = Field(default=60.0, gt=0)
    options: list[dict[str, Any]] = Field(
        default=[{}],
        description="broker-specific settings (see docs/brokers.md); a list is a matrix axis; "
        "an optional 'label' names the variant in cell ids",
    )

    @field_validator("options", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        return _as_list(value) if value is not None else [{}]

    @field_validator("options")
    @classmethod
    def _no_literal_secrets(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # A secret named so (password, default_pass, ...) comes from <name>_env or
        # <name>_file; the pre-flight adds the secrets a broker's definition declares.
        for options in value:
            check_secret_options(options)
        return value

    @field_validator("options")
    @classmethod
    def _distinct_labels(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # Each variant becomes its own cell folder: two variants with one label (they differ
        # only in a secret, which never reaches an id, or give the same values) would collide.
        seen: dict[str | None, int] = {}
        for number, options in enumerate(value, start=1):
            label = options_label(options)
            if label in seen:
                same = f"the same label {label!r}" if label else "no label"
                raise ValueError(
                    f"entries {seen[label]} and {number} give cell ids {same} (secret "
                    "values never appear in ids); give each a distinct 'label'"
                )
            seen[label] = number
        return value

    @field_validator("startup_timeout", mode="before")
    @classmethod
    def _parse_timeout(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("host")
    @classmethod
    def _an_address(cls, value: str) -> str:
        # Loopback by default; any other address only because the user wrote it here (or
        # gave --bind): brokers and the fault proxy then listen where executors reach them.
        if value == "localhost":
            return value
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"host {value!r} is not an IP address or 'localhost'") from None
        return value


class ZenohSettings(_Strict):
    """How the zenoh clients of zenoh cells talk to the router (docs/transports.md)."""

    shared_memory: bool = Field(
        default=False,
        description="zenoh's shared-memory transport: true lets sessions on one host hand "
        "payloads over in /dev/shm, so only references cross the router; false (default) "
        "sends every payload through the router's sockets, as every other broker is measured",
    )


class Scenario(_Strict):
    """A whole scenario file."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=80)
    description: str = ""
    targets: list[str]
    runtime: Literal["native", "docker", "external"] = "native"
    client: list[str | None] = Field(
        default=[None], description="client per protocol (matrix axis); None = the lean default"
    )
    resources: list[str | None] = Field(
        default=[None],
        description="resource profiles (matrix axis), e.g. 2cpu-4g: container limits (docker) "
        "or a cgroup per broker (native)",
    )
    workload: Workload = Workload()
    search: Search | None = None
    faults: Faults | None = None
    generator: Generator = Generator()
    broker: BrokerOptions = BrokerOptions()
    security: Security = Security()
    zenoh: ZenohSettings = ZenohSettings()
    repeat: int = Field(default=1, ge=1, le=1000)
    seed: int = 1
    gate: Gate | None = Field(
        default=None, description="thresholds `mqbench compare` judges runs of this scenario by"
    )

    @field_validator("targets", "client", "resources", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        return _as_list(value)

    @field_validator("targets")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        return _check_unique(value, "targets")

    @model_validator(mode="after")
    def _combinations(self) -> Scenario:
        if self.runtime == "external" and self.broker.port is None:
            raise ValueError("runtime 'external' needs broker.port (where the broker listens)")
        if self.runtime == "external" and any(r is not None for r in self.resources):
            raise ValueError(
                "resources profiles limit brokers mqbench starts; runtime 'external' cannot "
                "apply them (use runtime: native or docker)"
            )
        if self.faults is not None:
            self._check_faults(self.faults)
        self._check_security(self.security)
        if self.search is not None:
            axis = self.search.axis
            topology = self.workload.topology
            if axis not in ("rate", shape_of(topology).size_axis):
                raise ValueError(f"search axis {axis!r} does not apply to topology {topology!r}")
            if axis != "rate" and any(not float(v).is_integer() for v in self.search.values):
                raise ValueError(f"search values for {axis!r} must be whole numbers")
        return self

    def _check_security(self, security: Security) -> None:
        if self.runtime == "external":
            if security.tls and security.ca_file is None:
                raise ValueError(
                    "security: an external broker with tls: true needs ca_file (the CA that "
                    "signed its certificate)"
                )
            if security.client_cert:
                raise ValueError(
                    "security.client_cert: mqbench generates client certificates only for "
                    "brokers it starts; give cert_file and key_file for an external broker"
                )
            return
        for name in ("ca_file", "cert_file", "key_file", "server_name"):
            if getattr(security, name) is not None:
                raise ValueError(
                    f"security.{name} is for runtime 'external'; for brokers mqbench starts "
                    "it generates a throwaway CA and certificates per run"
                )

    def _check_faults(self, faults: Faults) -> None:
        if faults.proxy == "container" and self.runtime != "docker":
            raise ValueError(
                "faults.proxy 'container' runs Toxiproxy next to a broker in Docker; it needs "
                "runtime: docker (use proxy: builtin otherwise)"
            )
        w = self.workload
        groups = set()
        if w.groups is not None:
            groups = {g.id for g in w.groups.publishers} | {g.id for g in w.groups.subscribers}
        if faults.target not in {"subscribers", "publishers", "all"} | groups:
            known = ", ".join(sorted({"subscribers", "publishers", "all"} | groups))
            raise ValueError(f"faults.target {faults.target!r} is no client group (known: {known})")
        schedule = faults.schedule
        length = schedule.mttr if schedule.kind == "exponential" else schedule.duration
        if length is not None and length >= w.duration:
            raise ValueError(
                f"faults: a fault lasts {length:g} s on average, not shorter than the "
                f"{w.duration:g} s run"
            )
        if w.churn is not None:
            raise ValueError("faults and churn cannot be combined in one scenario")
