"""Compose files in ``compose/``: the entry a broker definition gives, and variable resolution.

A target that runs in Docker names, in its definition (``mqbench/brokers/definitions/``), a
``ComposeEntry``: the compose file, the service that *is* the broker, and the variable that
sets its published port (``MQBENCH_PORT`` for most; the RabbitMQ file serves two targets and
has ``MQBENCH_MQTT_PORT`` and ``MQBENCH_AMQP_PORT``). Other published ports
(``extra_ports``) get free host ports too, so two projects never clash.

``interpolate`` implements Compose's variable syntax (``$$``, ``$VAR``, ``${VAR}``,
``${VAR:-default}``, ``${VAR-default}``, ``${VAR:?error}``, ``${VAR?error}``,
``${VAR:+alt}``, ``${VAR+alt}``, nested defaults) so files can be checked and recorded
without a Docker engine.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mqbench.errors import BrokerError

COMPOSE_DIR_ENV = "MQBENCH_COMPOSE_DIR"
"""Environment variable pointing at the folder with the compose files."""


def compose_dir() -> Path:
    """The compose folder: ``$MQBENCH_COMPOSE_DIR`` or the repository's ``compose/``."""
    override = os.environ.get(COMPOSE_DIR_ENV)
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[3] / "compose"


@dataclass(frozen=True)
class ComposeEntry:
    """How the docker runtime runs one target: its compose file and broker service."""

    file: str
    """File name in the compose folder."""
    service: str
    """The broker service (the endpoint's container)."""
    port_var: str = "MQBENCH_PORT"
    """Variable with the host port clients connect to."""
    extra_ports: dict[str, int] = field(default_factory=dict)
    """Other published ports: variable -> container port (each gets a free host port)."""
    min_startup_s: float = 60.0
    """Start-up timeout floor: slow brokers get at least this long (first boot, JVM, DB)."""
    host_network: bool = False
    """The file takes ``MQBENCH_LISTEN_HOST``/``MQBENCH_LISTEN_PORT`` for the broker's
    listener, so it can run on the host's network (the runtime option ``network: host``)."""
    host_network_ports: tuple[str, ...] = ()
    """Other listener variables that get a free host port on the host's network (NATS's
    monitor port, which the healthcheck reads)."""

    def path(self, base: Path | None = None) -> Path:
        """The compose file's path."""
        return (base or compose_dir()) / self.file


TOXIPROXY = ComposeEntry("toxiproxy.yaml", "toxiproxy")
"""Toxiproxy (not a benchmark target; started by fault runs or by hand)."""


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class InterpolationError(ValueError):
    """A ``${VAR:?message}`` variable was missing, or the syntax is broken."""


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Substitute Compose variables in ``text`` from ``env`` (see the module docstring)."""
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch != "$":
            out.append(ch)
            i += 1
            continue
        if i + 1 < n and text[i + 1] == "$":
            out.append("$")
            i += 2
            continue
        if i + 1 < n and text[i + 1] == "{":
            end = _matching_brace(text, i + 1)
            out.append(_expand(text[i + 2 : end], env))
            i = end + 1
            continue
        match = _NAME.match(text, i + 1)
        if match is None:
            out.append("$")
            i += 1
            continue
        out.append(env.get(match.group(0), ""))
        i = match.end()
    return "".join(out)


def _matching_brace(text: str, open_at: int) -> int:
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    raise InterpolationError(f"unclosed '${{' in {text!r}")


def _expand(body: str, env: Mapping[str, str]) -> str:
    match = _NAME.match(body)
    if match is None:
        raise InterpolationError(f"invalid variable name in '${{{body}}}'")
    name, rest = match.group(0), body[match.end() :]
    value = env.get(name)
    if rest == "":
        return value or ""
    for op in (":-", ":?", ":+", "-", "?", "+"):
        if rest.startswith(op):
            arg = interpolate(rest[len(op) :], env)
            empty_counts = op.startswith(":")
            missing = value is None or (empty_counts and value == "")
            if op.endswith("-"):
                return arg if missing else str(value)
            if op.endswith("?"):
                if missing:
                    raise InterpolationError(f"{name}: {arg or 'required variable is missing'}")
                return str(value)
            return "" if missing else arg
    raise InterpolationError(f"invalid modifier in '${{{body}}}'")


def interpolate_tree(node: Any, env: Mapping[str, str]) -> Any:
    """Interpolate every string (values, not keys) in a parsed YAML tree."""
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [interpolate_tree(item, env) for item in node]
    if isinstance(node, dict):
        return {key: interpolate_tree(value, env) for key, value in node.items()}
    return node


def load_compose(path: Path, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Parse a compose file; with ``env``, also resolve its variables like Compose does."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise BrokerError(f"cannot read compose file {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict):
        raise BrokerError(f"{path}: not a compose file (no 'services' mapping)")
    if env is None:
        return data
    try:
        resolved: dict[str, Any] = interpolate_tree(data, env)
    except InterpolationError as exc:
        raise BrokerError(f"{path}: {exc}") from exc
    return resolved


def service_images(compose: Mapping[str, Any]) -> dict[str, str]:
    """Service name -> image reference (services without ``image`` are left out)."""
    services: Mapping[str, Any] = compose.get("services", {})
    return {
        name: str(spec["image"])
        for name, spec in services.items()
        if isinstance(spec, Mapping) and "image" in spec
    }
