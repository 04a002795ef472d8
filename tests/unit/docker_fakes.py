"""Fakes for the docker runtime tests: a ``docker`` CLI on PATH and a Docker SDK client.

The fake CLI is a Python script named ``docker``. Every call appends one JSON line
(``argv`` and the ``MQBENCH_*`` variables it saw) to a log, then answers with the first
rule whose ``match`` tokens all occur in its argv in order (stdout, stderr, exit code).
Calls no rule matches succeed silently.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors
import pytest

SCRIPT = """#!{python}
import json, os, sys
argv = sys.argv[1:]
with open(os.environ["FAKE_DOCKER_LOG"], "a") as log:
    seen = {{k: v for k, v in os.environ.items() if k.startswith("MQBENCH_")}}
    log.write(json.dumps({{"argv": argv, "env": seen}}) + "\\n")
with open(os.environ["FAKE_DOCKER_RULES"]) as fh:
    rules = json.load(fh)

def matches(tokens):
    i = 0
    for arg in argv:
        if i < len(tokens) and arg == tokens[i]:
            i += 1
    return i == len(tokens)

for rule in rules:
    if matches(rule["match"]):
        sys.stdout.write(rule.get("stdout", ""))
        sys.stderr.write(rule.get("stderr", ""))
        sys.exit(rule.get("rc", 0))
"""

ENGINE_INFO = {"ServerVersion": "27.3.1", "NCPU": 8, "MemTotal": 16 * 1024**3, "CgroupVersion": "2"}
"""What ``docker info --format '{{json .}}'`` answers for the healthy fake engine."""
HEALTHY_ENGINE = [
    {"match": ["compose", "version"], "stdout": "2.29.7\n"},
    {"match": ["info"], "stdout": json.dumps(ENGINE_INFO) + "\n"},
]
"""Rules for a working CLI, compose plugin and engine (every image present: ``image
inspect`` matches no rule and succeeds)."""


@dataclass
class FakeDocker:
    """A fake ``docker`` executable on PATH with editable rules and a call log."""

    bin_dir: Path
    rules_path: Path
    log_path: Path
    rules: list[dict[str, Any]] = field(default_factory=list)

    def set_rules(self, *rules: dict[str, Any]) -> None:
        """Replace the rules (first match wins)."""
        self.rules = list(rules)
        self.rules_path.write_text(json.dumps(self.rules))

    def calls(self) -> list[dict[str, Any]]:
        """Every call so far: ``{"argv": [...], "env": {...}}``."""
        if not self.log_path.exists():
            return []
        return [json.loads(line) for line in self.log_path.read_text().splitlines()]

    def argvs(self) -> list[list[str]]:
        """The argv of every call."""
        return [c["argv"] for c in self.calls()]

    def compose_verbs(self) -> list[str]:
        """The compose sub-command of every ``docker compose -p ...`` call, in order."""
        verbs = []
        for argv in self.argvs():
            if argv[:2] == ["compose", "-p"]:
                verbs.append(argv[5])
        return verbs


def install_fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDocker:
    """Put a fake ``docker`` first on PATH (and nothing else named docker)."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    script = bin_dir / "docker"
    script.write_text(SCRIPT.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    fake = FakeDocker(bin_dir, tmp_path / "rules.json", tmp_path / "calls.jsonl")
    fake.set_rules(*HEALTHY_ENGINE)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("FAKE_DOCKER_RULES", str(fake.rules_path))
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(fake.log_path))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    return fake


class FakeContainer:
    """What the runtime reads from ``docker.models.containers.Container``."""

    def __init__(self, cid: str, project: str, service: str, image: str, pid: int) -> None:
        self.id = cid
        self.attrs: dict[str, Any] = {
            "Id": cid,
            "Name": f"/{project}-{service}-1",
            "Image": f"sha256:{service}{'0' * 10}",
            "State": {"Status": "running", "Pid": pid},
            "Config": {
                "Image": image,
                "Labels": {
                    "com.docker.compose.project": project,
                    "com.docker.compose.service": service,
                },
            },
        }


class FakeImage:
    """An image with recorded repo digests."""

    def __init__(self, digests: list[str]) -> None:
        self.attrs = {"RepoDigests": digests}


class FakeApi:
    """``client.api``: replays recorded stats documents per container id."""

    def __init__(self, stats: Mapping[str, list[dict[str, Any]]]) -> None:
        self.stats_docs = {cid: list(seq) for cid, seq in stats.items()}
        self.stats_calls: list[tuple[str, dict[str, Any]]] = []

    def stats(self, container: str, **kwargs: Any) -> dict[str, Any]:
        self.stats_calls.append((container, kwargs))
        return self.stats_docs[container].pop(0)


class FakeContainers:
    def __init__(self, client: FakeSdk) -> None:
        self._client = client

    def list(self, all: bool = False, filters: dict[str, str] | None = None) -> list[Any]:
        self._client.list_filters.append(dict(filters or {}))
        project = (filters or {}).get("label", "").partition("=")[2]
        return [
            FakeContainer(f"{service}-cid", project, service, image, 1000 + i)
            for i, (service, image) in enumerate(self._client.services.items())
        ]


class FakeImages:
    """``client.images``: every image is present unless listed in ``FakeSdk.missing``."""

    def __init__(self, client: FakeSdk) -> None:
        self._client = client

    def get(self, image_id: str) -> FakeImage:
        if not image_id.startswith("sha256:"):
            if image_id in self._client.missing:
                raise docker.errors.ImageNotFound(image_id)
            image = FakeImage([])
            image.attrs.update({"Id": f"sha256:{'cd' * 32}", "Config": {"Labels": {}}})
            return image
        service = image_id.removeprefix("sha256:").removesuffix("0" * 10)
        image_ref = self._client.services[service]
        return FakeImage([f"{image_ref.rpartition(':')[0]}@sha256:{'ab' * 32}"])

    def list(self, filters: dict[str, str] | None = None) -> list[Any]:
        return []


class FakeSdk:
    """A Docker SDK client double: the project's containers, image digests, stats."""

    def __init__(
        self,
        services: dict[str, str],
        stats: dict[str, list[dict[str, Any]]] | None = None,
        missing: frozenset[str] = frozenset(),
    ) -> None:
        """``services``: compose service -> image; ``stats``: service -> documents;
        ``missing``: image references the engine does not have."""
        self.services = dict(services)
        self.missing = missing
        self.list_filters: list[dict[str, str]] = []
        self.api = FakeApi({f"{svc}-cid": list(docs) for svc, docs in (stats or {}).items()})
        self.containers = FakeContainers(self)
        self.images = FakeImages(self)
        self.env_seen: dict[str, str] | None = None
        self.made = 0
        self.closed = 0

    def factory(self, env: Mapping[str, str]) -> FakeSdk:
        """Use as ``DockerRuntime(client_factory=...)``; each call counts as one client."""
        self.env_seen = dict(env)
        self.made += 1
        return self

    def close(self) -> None:
        """Count a client closed (``made - closed`` are the clients still open)."""
        self.closed += 1


def engine_answers(path: str = "/var/run/docker.sock") -> bool:
    """True when something accepts connections on the engine's default socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2)
        try:
            probe.connect(path)
        except OSError:
            return False
    return True
