"""The scenario file as pydantic models. Unknown keys are rejected (``extra="forbid"``).

Fields that accept a list (targets, payload, pairs, rate, qos) are matrix axes: every
combination becomes one *cell* (see ``matrix.py``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mqbench.records.format import HEADER_SIZE
from mqbench.scenario.units import parse_duration, parse_size

MAX_PAYLOAD = 256 * 1024**2
"""MQTT's packet limit; larger payloads are refused before anything starts."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _as_list(value: Any) -> Any:
    return value if isinstance(value, list) else [value]


def _check_unique(values: list[Any], what: str) -> list[Any]:
    if not values:
        raise ValueError(f"{what} must not be empty")
    if len(set(values)) != len(values):
        raise ValueError(f"{what} has duplicate values: {values}")
    return values


class Workload(_Strict):
    """What the generator offers: topology, sizes, rates, QoS and timing."""

    topology: Literal["pairs"] = "pairs"
    pairs: list[Annotated[int, Field(gt=0, le=1_000_000)]] = Field(default=[10])
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

    @field_validator("pairs", "rate", "qos", mode="before")
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
                raise ValueError(f"payload {size} B is above the 256 MiB MQTT limit")
        return sizes

    @field_validator("duration", "warmup", "drain", mode="before")
    @classmethod
    def _parse_duration(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("pairs", "rate", "payload", "qos")
    @classmethod
    def _unique(cls, value: list[Any]) -> list[Any]:
        return _check_unique(value, "list")


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
        description="the scheduler busy-waits this close to a due send instead of sleeping "
        "(event-loop timers have ~1 ms resolution)",
    )

    @field_validator("workers")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError("workers must be >= 1 or 'auto'")
        return value

    @field_validator("connect_timeout", mode="before")
    @classmethod
    def _parse_timeout(cls, value: Any) -> float:
        return parse_duration(value)


class BrokerOptions(_Strict):
    """Where and how the broker runs (runtime-specific)."""

    host: str = "127.0.0.1"
    port: int | None = Field(default=None, ge=1, le=65535, description="None: a free port")
    pid: int | None = Field(default=None, description="external runtime: a PID to sample")
    startup_timeout: float = Field(default=60.0, gt=0)

    @field_validator("startup_timeout", mode="before")
    @classmethod
    def _parse_timeout(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("host")
    @classmethod
    def _loopback_only(cls, value: str) -> str:
        if value not in ("127.0.0.1", "localhost", "::1") and not value.startswith("127."):
            raise ValueError(f"host {value!r} is not a loopback address (allowed: 127.0.0.0/8)")
        return value


class Scenario(_Strict):
    """A whole scenario file."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=80)
    description: str = ""
    targets: list[str]
    runtime: Literal["native", "docker", "external"] = "native"
    workload: Workload = Workload()
    generator: Generator = Generator()
    broker: BrokerOptions = BrokerOptions()
    repeat: int = Field(default=1, ge=1, le=1000)
    seed: int = 1

    @field_validator("targets", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        return _as_list(value)

    @field_validator("targets")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        return _check_unique(value, "targets")

    @model_validator(mode="after")
    def _external_needs_port(self) -> Scenario:
        if self.runtime == "external" and self.broker.port is None:
            raise ValueError("runtime 'external' needs broker.port (where the broker listens)")
        return self
