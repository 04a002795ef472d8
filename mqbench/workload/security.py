"""A run's security material: credentials read once, a throwaway CA, a private directory.

:func:`check_security` is the pre-flight part (run by ``workload.preflight``): the password
can be read, the CA/certificate files exist, every client and every runtime/broker can do
TLS and authentication. :func:`open_run_security` is the run part: it reads the password,
creates a private directory outside the result folder (0700) and, for brokers mqbench
starts, generates the run's CA and certificates there (``brokers.tls_material``); ``close``
removes the directory, and so does the orphan reaper when mqbench is killed
(``process.lifeline.guard_dir``). The manifest gets :meth:`RunSecurity.describe`, never a
secret.

Secret broker options (``broker.options.password_env``, ...) are read per cell by
:func:`broker_start_options`; a run that has any gets the private directory too, for the
config fragments that hold them (``RunSecurity.broker_for``).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mqbench.brokers.base import BrokerSecurity
from mqbench.brokers.registry import get_definition, get_target
from mqbench.brokers.runtime.registry import get_runtime, runtime_capabilities
from mqbench.brokers.security.tls_material import TlsMaterial, generate
from mqbench.errors import BrokerError, ScenarioError
from mqbench.process import lifeline
from mqbench.scenario.matrix import Cell, broker_options
from mqbench.scenario.model import Scenario
from mqbench.scenario.security import (
    Credentials,
    Secret,
    check_secret_options,
    check_security_files,
    has_secret_references,
    resolve_password,
    resolve_secret_options,
)
from mqbench.transports.base import ClientSecurity, ClientTls
from mqbench.transports.registry import get_transport, resolve_client


def check_security(scenario: Scenario) -> None:
    """Raise the first reason the scenario's ``security`` cannot be honoured (one line)."""
    security = scenario.security
    if not security.enabled:
        return
    if security.auth is not None:
        resolve_password(security.auth)
    check_security_files(security)
    runtime = get_runtime(scenario.runtime)
    for target_name in scenario.targets:
        target = get_target(target_name)
        for client in scenario.client:
            name = resolve_client(target.transport, client)
            capabilities = get_transport(name).capabilities
            if security.tls and capabilities.tls is not None:
                raise ScenarioError(
                    f"target {target_name!r}: security.tls: the {name} client cannot: "
                    f"{capabilities.tls}"
                )
            if security.auth is not None and capabilities.auth is not None:
                raise ScenarioError(
                    f"target {target_name!r}: security.auth: the {name} client cannot: "
                    f"{capabilities.auth}"
                )
        try:
            runtime.check_security(target_name, security.tls, security.auth is not None)
        except BrokerError as exc:
            raise BrokerError(f"target {target_name!r}: {exc}") from None


@dataclass(frozen=True)
class SecurityFacts:
    """What the manifest's ``security`` entry says of a run: what was on, the user name and
    the certificates' facts; never a secret."""

    tls: bool
    auth: bool
    username: str | None = None
    """The scenario's user (recorded only when ``security`` is enabled)."""
    enabled: bool = True
    """False: a plain run, recorded as ``tls`` and ``auth`` only."""
    certificates: Mapping[str, Any] | None = None
    """Generated: ``TlsMaterial.describe()``; the user's (external broker): which CA file,
    and whether a client certificate is given. None: no TLS."""
    client_certificate_required: bool | None = None
    """Whether the brokers mqbench starts require client certificates (None: mqbench
    starts no broker)."""

    def describe(self) -> dict[str, Any]:
        """The manifest's ``security`` entry, its keys in the order it has always had."""
        data: dict[str, Any] = {"tls": self.tls, "auth": self.auth}
        if not self.enabled:
            return data
        data["username"] = self.username
        if self.certificates is not None:
            data["certificates"] = dict(self.certificates)
        if self.client_certificate_required is not None:
            data["client_certificate_required"] = self.client_certificate_required
        return data


PLAIN = SecurityFacts(tls=False, auth=False, enabled=False)
"""The facts of a run without ``security``."""


@dataclass
class RunSecurity:
    """What one run uses: the brokers' and the clients' settings, and where files are."""

    private_dir: Path | None
    broker: BrokerSecurity | None
    """For brokers mqbench starts (None: plain, or an external broker)."""
    client: ClientSecurity | None
    facts: SecurityFacts

    def describe(self) -> dict[str, Any]:
        """The manifest's ``security`` entry: what was on, fingerprints; no secret."""
        return self.facts.describe()

    def broker_for(self, options: BrokerStartOptions) -> BrokerSecurity | None:
        """What a broker started with ``options`` is configured with: the run's security,
        or, for a plain run whose options hold a :class:`Secret`, only the private
        directory (the broker writes the secret there, never into its work directory)."""
        if self.broker is not None or self.private_dir is None:
            return self.broker
        if not options.holds_secret:
            return None
        return BrokerSecurity(private_dir=self.private_dir / "broker")

    def close(self) -> None:
        """Remove the private directory (keys, password files) and everything in it."""
        if self.private_dir is not None:
            shutil.rmtree(self.private_dir, ignore_errors=True)
            lifeline.release_dir(self.private_dir)
            self.private_dir = None


def _values(value: Any) -> list[Any]:
    """Every value in ``value``, nested mappings and lists walked."""
    if isinstance(value, Mapping):
        return [w for v in value.values() for w in _values(v)]
    if isinstance(value, list):
        return [w for v in value for w in _values(v)]
    return [value]


@dataclass(frozen=True)
class BrokerStartOptions:
    """What the runtime is asked to start a cell's broker with: the cell's
    ``broker.options`` variant (without ``label``), ``broker.pid`` and the resources
    profile (``scenario.matrix.broker_options``), every secret option read (a
    :class:`Secret`).

    The keys differ per runtime and broker, so ``values`` is the options document; it
    becomes typed where its readers parse it, at the runtime's edge: the runtime's own keys
    (``pid``, ``resources``, the docker keys) in the runtime, the rest as the broker's
    ``<Broker>Options`` model (``brokers.runtime.options.parse_options``).
    """

    values: Mapping[str, Any]

    @property
    def holds_secret(self) -> bool:
        """A :class:`Secret` is among the values (nested mappings and lists too)."""
        return any(isinstance(v, Secret) for v in _values(self.values))

    def request_options(self) -> dict[str, Any]:
        """``StartRequest.options`` (and what ``check_options`` checks): a copy."""
        return dict(self.values)


def broker_start_options(scenario: Scenario, cell: Cell) -> BrokerStartOptions:
    """The options ``cell``'s broker is started with, secret options read. ScenarioError
    naming the key when a secret is given in the text (also one the target's definition
    declares) or cannot be read."""
    declared = get_definition(cell.target).secret_options
    options = broker_options(scenario, cell)
    try:
        check_secret_options(options, "", declared)
    except ValueError as exc:
        raise ScenarioError(f"broker.options: {exc}") from None
    return BrokerStartOptions(resolve_secret_options(options, "broker.options", declared))


def _private_dir() -> Path:
    """A fresh 0700 folder outside the result folder, removed by the orphan reaper if
    mqbench dies before :meth:`RunSecurity.close`."""
    path = Path(tempfile.mkdtemp(prefix="mqbench-private-"))
    lifeline.guard_dir(path)
    return path


def _has_secret_options(scenario: Scenario) -> bool:
    declared = frozenset(
        name for target in scenario.targets for name in get_definition(target).secret_options
    )
    return any(has_secret_references(o, declared) for o in scenario.broker.options)


def open_run_security(scenario: Scenario) -> RunSecurity:
    """Read the credentials and make the run's certificates (see the module docstring)."""
    security = scenario.security
    if not security.enabled:
        starts = runtime_capabilities(scenario.runtime).starts_broker
        secrets = starts and _has_secret_options(scenario)
        private = _private_dir() if secrets else None
        return RunSecurity(private, None, None, PLAIN)
    credentials: Credentials | None = None
    if security.auth is not None:
        credentials = resolve_password(security.auth)
    username = credentials.username if credentials else None
    password = credentials.password if credentials else None
    facts = SecurityFacts(tls=security.tls, auth=credentials is not None, username=username)
    if not runtime_capabilities(scenario.runtime).starts_broker:
        tls = None
        if security.tls:
            tls = ClientTls(
                ca_file=_text(security.ca_file),
                cert_file=_text(security.cert_file),
                key_file=_text(security.key_file),
                server_hostname=security.server_name,
            )
            facts = replace(
                facts,
                certificates={
                    "generated": False,
                    "ca_file": _text(security.ca_file),
                    "client_certificate": security.cert_file is not None,
                },
            )
        return RunSecurity(None, None, ClientSecurity(username, password, tls), facts)
    private_dir = _private_dir()
    try:
        material: TlsMaterial | None = None
        if security.tls:
            material = generate(private_dir / "tls", client_cert=security.client_cert)
        broker = BrokerSecurity(
            private_dir=private_dir / "broker",
            tls=material,
            require_client_cert=security.client_cert,
            username=username,
            password=password,
        )
        client_tls = None
        if material is not None:
            client_tls = ClientTls(
                ca_file=str(material.ca_cert),
                cert_file=_text(material.client_cert),
                key_file=_text(material.client_key),
            )
        facts = replace(
            facts,
            certificates=material.describe() if material is not None else None,
            client_certificate_required=security.client_cert,
        )
        return RunSecurity(
            private_dir, broker, ClientSecurity(username, password, client_tls), facts
        )
    except BaseException:
        shutil.rmtree(private_dir, ignore_errors=True)
        lifeline.release_dir(private_dir)
        raise


def _text(path: Path | None) -> str | None:
    return str(path) if path is not None else None
