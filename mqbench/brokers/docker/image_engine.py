"""The real side of ``images.py``: a Docker engine through the Docker SDK, and debootstrap.

``SdkEngine`` implements ``images.ImageEngine`` with the Docker SDK for Python (image
lookups, pulls, builds with the engine's builder from a tar context, ``docker import``).
``debootstrap_rootfs`` makes the Debian 12 minbase tarball the ``debian-rootfs`` image is
imported from (root and Debian's ``debootstrap`` needed; kept in the image cache so a
machine makes it once).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mqbench.brokers.docker.image_recipes import (
    DEBIAN_SUITE,
    HostFacts,
    cache_dir,
    local_repository,
)
from mqbench.brokers.docker.images import (
    LABEL_RECIPE,
    BuildResult,
    ImageBuilder,
    ImageFacts,
    repository_of,
)
from mqbench.errors import BrokerError

LOOKUP_TIMEOUT_S = 60
PULL_TIMEOUT_S = 1800.0
"""Image pulls may take long on a slow link (TBMQ's images are ~1 GB together)."""
BUILD_TIMEOUT_S = 1800
DEBOOTSTRAP_TIMEOUT_S = 1800.0
MIRROR_ENV = "MQBENCH_DEBIAN_MIRROR"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
HOST_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
"""The host's deb822 sources (bookworm, -updates, -security): copied into the rootfs so
images get the same package versions the host installs."""
CliRunner = Callable[[list[str], float], "subprocess.CompletedProcess[str]"]
"""Runs ``docker <args>`` with a timeout (``runtime.DockerCli.run`` fits)."""
TRIM = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man")


class SdkEngine:
    """``images.ImageEngine`` over the Docker SDK (``DOCKER_HOST`` honoured)."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        client: Any = None,
        cli: CliRunner | None = None,
    ) -> None:
        """Connect lazily with ``env`` (default ``os.environ``), or look images up through
        an existing SDK ``client``. Pulls run ``docker pull`` through ``cli`` (default: the
        docker CLI on PATH); builds get an SDK client with a long read timeout."""
        self._env = dict(os.environ if env is None else env)
        self._client: Any = client
        self._owns_client = client is None
        self._slow_client: Any = None
        self._cli = cli or self._run_cli

    def close(self) -> None:
        """Close the SDK clients this engine made (their pooled engine connections); a
        ``client`` passed in stays its owner's to close. The engine may be used again."""
        made = [self._slow_client, self._client if self._owns_client else None]
        self._slow_client = None
        if self._owns_client:
            self._client = None
        for client in made:
            close_sdk_client(client)

    def __enter__(self) -> SdkEngine:
        """Use as a context manager that closes the clients it made on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the clients this engine made."""
        self.close()

    def _sdk(self, timeout: int) -> Any:
        try:
            import docker

            return docker.from_env(environment=self._env, timeout=timeout)
        except Exception as exc:
            raise BrokerError(
                f"no Docker engine answers (scripts/install_docker.sh): {exc}"
            ) from exc

    @property
    def client(self) -> Any:
        """The SDK client for lookups."""
        if self._client is None:
            self._client = self._sdk(LOOKUP_TIMEOUT_S)
        return self._client

    @property
    def slow_client(self) -> Any:
        """The SDK client for pulls and builds (long read timeout)."""
        if self._slow_client is None:
            self._slow_client = self._sdk(BUILD_TIMEOUT_S)
        return self._slow_client

    def image(self, ref: str) -> ImageFacts | None:
        """The image ``ref`` names, or None."""
        import docker.errors

        try:
            image = self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            raise BrokerError(f"cannot inspect image {ref}: {exc}") from exc
        return _facts(ref, image.attrs)

    def pull(self, ref: str) -> bool:
        """``docker pull``; False when it fails (no registry reachable, unknown image)."""
        try:
            return self._cli(["pull", "--quiet", ref], PULL_TIMEOUT_S).returncode == 0
        except BrokerError:
            return False

    def _run_cli(self, args: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        docker = shutil.which("docker", path=self._env.get("PATH"))
        if docker is None:
            raise BrokerError("the docker CLI is not installed")
        try:
            return subprocess.run(
                [docker, *args],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=self._env,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BrokerError(f"`docker {' '.join(args)}` failed: {exc}") from exc

    def local_images(self, recipe: str) -> list[ImageFacts]:
        """Images labelled ``org.mqbench.recipe=<recipe>``, newest first."""
        found = self.client.images.list(filters={"label": f"{LABEL_RECIPE}={recipe}"})
        prefix = f"{local_repository()}/"
        rows = [
            (str(i.attrs.get("Created", "")), i)
            for i in found
            if any(t.startswith(prefix) for t in i.tags)
        ]
        rows.sort(key=lambda row: row[0], reverse=True)
        return [
            _facts(sorted(t for t in i.tags if t.startswith(prefix))[-1], i.attrs) for _, i in rows
        ]

    def build(
        self, context: bytes, tag: str, build_args: Mapping[str, str], labels: Mapping[str, str]
    ) -> str:
        """Build with the engine's builder; ``BrokerError`` with the last output lines."""
        lines: list[str] = []
        image_id = ""
        try:
            stream = self.slow_client.api.build(
                fileobj=io.BytesIO(context),
                custom_context=True,
                tag=tag,
                buildargs=dict(build_args),
                labels=dict(labels),
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
            )
            for chunk in stream:
                if "error" in chunk:
                    tail = " | ".join(lines[-5:])
                    raise BrokerError(f"building {tag} failed: {chunk['error'].strip()} ({tail})")
                text = str(chunk.get("stream", "")).strip()
                if text:
                    lines.append(text)
                aux = chunk.get("aux")
                if isinstance(aux, dict) and "ID" in aux:
                    image_id = str(aux["ID"])
        except BrokerError:
            raise
        except Exception as exc:
            raise BrokerError(f"building {tag} failed: {exc}") from exc
        if not image_id:
            facts = self.image(tag)
            image_id = facts.id if facts else ""
        return image_id

    def import_rootfs(self, tarball: Path, ref: str) -> str:
        """``docker import`` the tarball as ``ref``."""
        repository = repository_of(ref)
        tag = ref[len(repository) + 1 :]
        try:
            self.client.api.import_image_from_file(
                str(tarball), repository=repository, tag=tag, changes=['CMD ["/bin/bash"]']
            )
        except Exception as exc:
            raise BrokerError(f"cannot import {tarball} as {ref}: {exc}") from exc
        facts = self.image(ref)
        if facts is None:
            raise BrokerError(f"importing {tarball} as {ref} left no image")
        return facts.id


def _facts(ref: str, attrs: Mapping[str, Any]) -> ImageFacts:
    config = attrs.get("Config") or {}
    return ImageFacts(
        ref, str(attrs.get("Id", "")), dict(config.get("Labels") or {}), int(attrs.get("Size", 0))
    )


def debootstrap_rootfs(tarball: Path) -> None:
    """Make ``tarball``: Debian 12 minbase, apt sources as the host's, docs trimmed."""
    debootstrap = shutil.which("debootstrap") or (
        "/usr/sbin/debootstrap" if Path("/usr/sbin/debootstrap").exists() else None
    )
    if debootstrap is None:
        raise BrokerError(
            "debootstrap is not installed (apt-get install debootstrap; scripts/install_docker.sh)"
        )
    if os.geteuid() != 0:
        raise BrokerError("making the Debian base image needs root (debootstrap)")
    mirror = os.environ.get(MIRROR_ENV, DEFAULT_MIRROR)
    tarball.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=tarball.parent))
    root = work / "root"
    try:
        _run(
            [debootstrap, "--variant=minbase", DEBIAN_SUITE, str(root), mirror],
            "debootstrap",
        )
        for sub in TRIM:
            target = root / sub
            if target.is_dir():
                shutil.rmtree(target)
                target.mkdir()
        if HOST_SOURCES.is_file():
            (root / "etc/apt/sources.list.d").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(HOST_SOURCES, root / "etc/apt/sources.list.d/debian.sources")
            (root / "etc/apt/sources.list").unlink(missing_ok=True)
        partial = work / "rootfs.tar"
        _run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(partial), "."], "tar")
        partial.replace(tarball)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(argv: list[str], what: str) -> None:
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=DEBOOTSTRAP_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BrokerError(f"{what} failed: {exc}") from exc
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise BrokerError(f"{what} failed (exit {proc.returncode}): {tail}")


def build_local_images(
    names: list[str], progress: Callable[[str], None] | None = None
) -> list[BuildResult]:
    """``mqbench brokers build-images``: build ``names`` (all when empty) on this engine."""
    with SdkEngine() as engine:
        builder = ImageBuilder(
            engine,
            HostFacts(),
            debootstrap_rootfs,
            cache_dir(),
            progress or (lambda _line: None),
        )
        return builder.build(names)


def close_sdk_client(client: Any) -> None:
    """Close a Docker SDK client (None, or a fake without ``close``, is left as it is).

    An SDK client keeps its connections to the engine's socket pooled until closed; one
    dropped open leaves them to the garbage collector, which reports each as unclosed.
    """
    close = getattr(client, "close", None)
    if close is not None:
        with contextlib.suppress(Exception):
            close()
