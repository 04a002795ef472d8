"""What the native runtime needs to know about one broker: a ``NativeSpec``.

A spec finds the broker's executable, says how to install it when it is missing, writes
the broker's config into the instance's work directory, builds the command line, checks
readiness at the protocol level (``probes.py``) and reports the version. The runtime
(``native.py``) does everything else: ports, process start and stop, timeouts, logs and
error messages. A broker's definition (``definition.py``) names its spec.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqbench.brokers.runtime.mounts import NATIVE, Mounts
from mqbench.brokers.runtime.options import BrokerOptionsModel, NoOptions, parse_options
from mqbench.brokers.runtime.settings import BrokerSettings

if TYPE_CHECKING:
    from mqbench.brokers.base import BrokerSecurity

ReadyCheck = Callable[[str, int, float], bool]
"""``(host, port, timeout_s) -> ready``: one bounded protocol-level probe."""


@dataclass(frozen=True)
class LaunchPlan:
    """How to start one broker instance: its command line and what goes into the manifest."""

    argv: list[str]
    config_path: Path | None
    config_text: str
    settings: BrokerSettings = field(default_factory=dict)
    """Settings that change benchmark results (queue limits, buffers, user, ...), written
    into the manifest as they are (``settings.py``)."""
    ready_check: ReadyCheck | None = None
    """This instance's readiness probe when it differs from the spec's ``check_ready``
    (a TLS listener needs a TLS probe)."""


class NativeSpec(ABC):
    """A broker that the native runtime can run as a local process."""

    name: str
    """Spec name, e.g. ``mosquitto``; targets refer to it by this name."""
    executable: str
    """File name of the broker's executable, looked up by ``find_binary``."""
    install_hint: str
    """A command that installs the executable, shown when it is missing."""
    options_model: type[BrokerOptionsModel] = NoOptions
    """The broker options (``broker.options``) this spec knows: their types, defaults and
    descriptions (``options.py``)."""
    no_tls: str = "mqbench does not configure TLS for this broker"
    """Why ``prepare_secured`` cannot give this broker a TLS listener ('' when it can)."""
    no_auth: str = "mqbench does not configure users for this broker"
    """Why ``prepare_secured`` cannot make this broker require a password ('' when it can)."""

    def check_security(self, tls: bool, auth: bool) -> None:
        """BrokerError with the one-line reason when TLS or auth is asked and not supported."""
        from mqbench.errors import BrokerError

        if tls and self.no_tls:
            raise BrokerError(f"{self.name}: tls: true is not supported: {self.no_tls}")
        if auth and self.no_auth:
            raise BrokerError(f"{self.name}: security.auth is not supported: {self.no_auth}")

    def prepare_secured(
        self,
        binary: Path,
        workdir: Path,
        host: str,
        port: int,
        options: Mapping[str, Any],
        security: BrokerSecurity,
    ) -> LaunchPlan:
        """Like ``prepare``, with a TLS listener and/or required credentials.

        Files holding secrets go into ``security.private_dir``, never into ``workdir``
        (which lies in the result folder); the returned plan's ``config_text`` and
        ``settings`` name no secret. The default refuses (``check_security``).
        """
        self.check_security(security.tls is not None, security.auth)
        return self.prepare(binary, workdir, host, port, options)

    def candidate_paths(self) -> Iterable[Path]:
        """Places to look for the executable besides ``PATH`` (in order)."""
        return ()

    def find_binary(self) -> Path | None:
        """Return the broker executable, or None when it is not installed."""
        for candidate in self.candidate_paths():
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
        found = shutil.which(self.executable)
        return Path(found) if found else None

    @abstractmethod
    def version(self, binary: Path) -> str:
        """The broker's version string (``"unknown"`` when it cannot be determined)."""

    @abstractmethod
    def prepare(
        self, binary: Path, workdir: Path, host: str, port: int, options: Mapping[str, Any]
    ) -> LaunchPlan:
        """Write the config into ``workdir`` and return the command line to start the broker.

        ``options`` are the scenario's broker options; unknown keys raise
        ``mqbench.errors.BrokerError`` so a typo never silently changes nothing.
        """

    @abstractmethod
    def check_ready(self, host: str, port: int, timeout_s: float) -> bool:
        """One protocol-level readiness probe, bounded by ``timeout_s``; never raises."""

    def check_options(self, options: Mapping[str, Any]) -> None:
        """BrokerError naming an option this broker does not know, or a value of the wrong
        type (before it starts)."""
        parse_options(self.name, self.options_model, options)

    def missing_reason(self) -> str:
        """One line saying what is missing when ``find_binary`` returns None, and the fix."""
        return f"{self.executable} not found; install it with: {self.install_hint}"

    def companion_pids(self, plan: LaunchPlan) -> list[int]:
        """Processes the broker started outside its own process tree that must stop with it.

        Example: the ``epmd`` daemon an Erlang node starts. Called by ``NativeBroker.stop``
        after the broker process has stopped; those PIDs get SIGTERM (then SIGKILL).
        """
        return []


def run_for_output(argv: list[str], timeout_s: float = 5.0) -> str:
    """Run a short command and return stdout+stderr ('' if it cannot run in time)."""
    try:
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout.decode("utf-8", "replace")


def first_match(pattern: str, text: str, default: str = "unknown") -> str:
    """Group 1 of the first match of ``pattern`` in ``text``, or ``default``."""
    match = re.search(pattern, text)
    return match.group(1) if match else default


class ConfiguredSpec(NativeSpec):
    """A spec that writes one configuration for plain and secured runs alike: ``prepare``
    and ``prepare_secured`` both call ``configure`` (``security`` None when plain)."""

    no_tls = ""
    no_auth = ""

    def prepare(
        self, binary: Path, workdir: Path, host: str, port: int, options: Mapping[str, Any]
    ) -> LaunchPlan:
        """``configure`` without security."""
        return self.configure(binary, workdir, host, port, options, None)

    def prepare_secured(
        self,
        binary: Path,
        workdir: Path,
        host: str,
        port: int,
        options: Mapping[str, Any],
        security: BrokerSecurity,
    ) -> LaunchPlan:
        """``configure`` with ``security``, after refusing what the spec cannot do."""
        self.check_security(security.tls is not None, security.auth)
        return self.configure(binary, workdir, host, port, options, security)

    @abstractmethod
    def configure(
        self,
        binary: Path,
        workdir: Path,
        host: str,
        port: int,
        options: Mapping[str, Any],
        security: BrokerSecurity | None,
        mounts: Mounts = NATIVE,
    ) -> LaunchPlan:
        """Write the config into ``workdir`` (secrets into ``security.private_dir``) and
        return the command line; the contract of ``prepare`` and ``prepare_secured``.

        Every file the config or the command line names is named through
        ``mounts.seen`` (the path the broker process sees: the same one natively, the
        mount point inside a container)."""
