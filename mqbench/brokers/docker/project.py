"""One Docker Compose project: its name, file and variables, and the compose verbs mqbench uses.

Compose puts the label ``com.docker.compose.project=<name>`` on every container, network
and volume of a project; ``down -v --remove-orphans`` removes all of them, and
``docker compose -p <name> down`` finds them by that label even without the file (the
orphan reaper relies on it: ``mqbench/process/_reaper.py``).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mqbench.brokers.docker.engine import CHECK_TIMEOUT_S, DockerCli, last_lines
from mqbench.errors import BrokerError

DOWN_TIMEOUT_S = 120.0
"""How long ``docker compose down`` may take."""
STOP_GRACE_S = 10
"""Seconds containers get between SIGTERM and SIGKILL on ``down``."""


@dataclass
class ComposeProject:
    """One compose project: its name, file and the variables it was started with."""

    name: str
    file: Path
    variables: dict[str, str] = field(default_factory=dict)
    cli: DockerCli = field(default_factory=DockerCli)

    def _base(self) -> list[str]:
        return ["compose", "-p", self.name, "-f", str(self.file)]

    def run(self, args: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        """``docker compose -p <name> -f <file> <args>`` with the project's variables."""
        return self.cli.run([*self._base(), *args], timeout_s, self.variables)

    def down(self) -> subprocess.CompletedProcess[str]:
        """Remove containers, networks, volumes and orphans of the project."""
        return self.run(
            ["down", "-v", "--remove-orphans", "--timeout", str(STOP_GRACE_S)], DOWN_TIMEOUT_S
        )

    def logs(self, lines: int, services: list[str] | None = None) -> str:
        """The last ``lines`` log lines per service ('' when they cannot be read)."""
        try:
            proc = self.run(
                ["logs", "--no-color", "--tail", str(lines), *(services or [])], CHECK_TIMEOUT_S
            )
        except BrokerError:
            return ""
        return proc.stdout.rstrip("\n")

    def log_line(self, lines: int, services: list[str] | None = None) -> str:
        """The last ``lines`` log lines joined into one line (`` | ``), for error messages;
        ``(none)`` when there are none."""
        return last_lines(self.logs(lines, services), lines) or "(none)"

    def ps(self) -> list[dict[str, Any]]:
        """``docker compose ps -a --format json`` as a list (both JSON shapes compose emits)."""
        try:
            proc = self.run(["ps", "-a", "--format", "json"], CHECK_TIMEOUT_S)
        except BrokerError:
            return []
        if proc.returncode != 0:
            return []
        return parse_ps_json(proc.stdout)


def parse_ps_json(text: str) -> list[dict[str, Any]]:
    """Parse ``compose ps --format json``: a JSON array (old) or one object per line (new)."""
    text = text.strip()
    if not text:
        return []
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, list):
        return [d for d in data if isinstance(d, dict)]
    if isinstance(data, dict):
        return [data]
    rows: list[dict[str, Any]] = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            item = json.loads(line)
            if isinstance(item, dict):
                rows.append(item)
    return rows


def failed_services(ps_rows: list[dict[str, Any]]) -> list[str]:
    """Services that are unhealthy, exited or dead (from ``parse_ps_json`` rows)."""
    bad: list[str] = []
    for row in ps_rows:
        health = str(row.get("Health", "")).lower()
        state = str(row.get("State", "")).lower()
        if health == "unhealthy" or state in ("exited", "dead", "restarting"):
            service = str(row.get("Service") or row.get("Name") or "?")
            if service not in bad:
                bad.append(service)
    return bad
