"""Helpers native specs share to configure TLS and credentials (``prepare_secured``)."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

from mqbench.brokers.base import BrokerSecurity
from mqbench.brokers.runtime.probes import probe_tls_context


def private_file(security: BrokerSecurity, name: str) -> Path:
    """An empty file ``name`` in the private directory, readable by this user only (0600).

    Secret-bearing broker files (password files, config fragments holding a password) go
    here, never into the broker's work directory inside the result folder.
    """
    security.private_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = security.private_dir / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)
    return path


def tls_probe_context(security: BrokerSecurity) -> ssl.SSLContext:
    """The readiness probe's TLS context: verifies with the run's CA, presents the client
    certificate when the broker requires one."""
    assert security.tls is not None
    tls = security.tls
    if security.require_client_cert:
        return probe_tls_context(tls.ca_cert, tls.client_cert, tls.client_key)
    return probe_tls_context(tls.ca_cert)
