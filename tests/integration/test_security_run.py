"""A whole ``mqbench run`` with TLS, client certificates and a password on every protocol,
then a search for the password in everything the run left behind and printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SECRET = "Qx9-integration-secret-7d1f"
CLI = [sys.executable, "-m", "mqbench.cli"]
TARGETS = ["mosquitto", "nats", "redis", "rabbitmq-mqtt", "rabbitmq-amqp", "tbmq-style"]
"""Every protocol the native brokers speak with TLS and credentials (zenoh: TLS only)."""


class Run:
    """What the run produced: its folder, its console output and its manifest."""

    def __init__(
        self, result_dir: Path, console: str, returncode: int, private_dirs_left: set[Path]
    ) -> None:
        self.private_dirs_left = private_dirs_left
        self.result_dir = result_dir
        self.console = console
        self.returncode = returncode
        self.manifest: dict[str, Any] = json.loads((result_dir / "manifest.json").read_text())


@pytest.fixture(scope="module")
def secured_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("secured")
    scenario = root / "secured.yaml"
    scenario.write_text(
        "name: secured\n"
        f"targets: [{', '.join(TARGETS)}]\n"
        "security:\n"
        "  tls: true\n"
        "  client_cert: true\n"
        "  auth: {username: benchuser, password_env: MQBENCH_IT_PASSWORD}\n"
        "workload: {pairs: 2, rate: 50, payload: 64, duration: 2s, warmup: 1s, drain: 2s}\n"
        "broker: {startup_timeout: 90s}\n"
    )
    out = root / "results"
    env = {**os.environ, "MQBENCH_IT_PASSWORD": SECRET}
    env.pop("MQBENCH_DEBUG", None)
    before = _private_dirs()
    proc = subprocess.run(
        [*CLI, "run", str(scenario), "--out", str(out)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    (result_dir,) = (out / "secured").iterdir()
    return Run(result_dir, proc.stdout, proc.returncode, _private_dirs() - before)


def test_every_protocol_delivered_everything_over_tls_with_the_password(
    secured_run: Run,
) -> None:
    assert secured_run.returncode == 0, secured_run.console[-2000:]
    cells = secured_run.manifest["cells"]
    assert sorted(c["params"]["target"] for c in cells) == sorted(TARGETS)
    for cell in cells:
        assert cell["status"] == "completed", (cell["id"], cell.get("error"))
        sent, received = cell["totals"]["sent"], cell["totals"]["received"]
        assert sent > 0 and received == sent, cell["id"]
        security = cell["broker"]["security"]
        assert (security["tls"], security["auth"], security["username"]) == (
            True,
            True,
            "benchuser",
        )
        assert security["client_certificate_required"] is True


def test_the_manifest_records_the_certificates_not_the_keys(secured_run: Run) -> None:
    facts = secured_run.manifest["security"]
    assert facts["tls"] is True and facts["auth"] is True
    fingerprints = facts["certificates"]["sha256_fingerprints"]
    assert set(fingerprints) == {"ca", "server", "client"}
    assert "PRIVATE KEY" not in json.dumps(secured_run.manifest)


def test_the_password_is_nowhere_in_the_results_broker_logs_or_console(secured_run: Run) -> None:
    needle = SECRET.encode()
    files = [p for p in secured_run.result_dir.rglob("*") if p.is_file()]
    logs = [p for p in files if p.suffix == ".log"]
    assert len(logs) >= len(TARGETS)  # the brokers' own logs are searched too
    found = [str(p) for p in files if needle in p.read_bytes()]
    assert found == []
    assert SECRET not in secured_run.console


def test_the_private_directory_with_keys_and_password_files_is_removed(secured_run: Run) -> None:
    assert secured_run.private_dirs_left == set()


def _private_dirs() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("mqbench-private-*"))


def test_zenoh_delivers_over_tls_with_client_certificates(tmp_path: Path) -> None:
    scenario = tmp_path / "zenoh-tls.yaml"
    scenario.write_text(
        "name: zenoh-tls\ntargets: [zenoh]\nsecurity: {tls: true, client_cert: true}\n"
        "workload: {pairs: 2, rate: 20, payload: 64, duration: 2s, warmup: 1s, drain: 2s}\n"
    )
    out = tmp_path / "results"
    proc = subprocess.run(
        [*CLI, "run", str(scenario), "--out", str(out), "--no-analyze"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (result_dir,) = (out / "zenoh-tls").iterdir()
    manifest = json.loads((result_dir / "manifest.json").read_text())
    (cell,) = manifest["cells"]
    assert cell["broker"]["settings"]["listen/endpoints"][0].startswith("tls/")
    assert cell["totals"]["sent"] > 0
    assert cell["totals"]["received"] == cell["totals"]["sent"]
