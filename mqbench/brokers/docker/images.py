"""Images without a registry: which image a compose service runs, and local builds.

**Selection** (``choose_images``). Every compose service names its image through a
variable (``image: ${MQBENCH_IMAGE_MOSQUITTO:-eclipse-mosquitto:2.0.20}``; the variable is
``image_variable(service)``). The image a service asks for is used when the engine has it or
can pull it. Otherwise, under the default policy ``auto``, the locally built image that
stands in for that repository (``image_recipes.py``; tagged ``mqbench-local/<name>:<version>``,
never an official name) is used, and the choice is recorded: the manifest says per service
which image ran, its id, whether it is ``official`` or ``local``, and the software inside.
``MQBENCH_IMAGES=official`` never substitutes; ``local`` prefers the local image. When
neither exists: one line naming the image and the command that builds it.

**Builds** (``build_images``): the recipes of the asked targets plus their parents, parents
first. A recipe whose image exists with the same recipe hash (build context, staged files,
pinned versions, parent image id) is skipped, so a warm run costs a few lookups.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from mqbench.brokers.docker.image_recipes import (
    DEBIAN_PACKAGES,
    RECIPE_LIST,
    RECIPES,
    HostFacts,
    ImageRecipe,
    MissingInput,
    Resolved,
    Software,
    recipe_for_repository,
)
from mqbench.errors import BrokerError, UsageError

LABEL_RECIPE = "org.mqbench.recipe"
LABEL_HASH = "org.mqbench.recipe-hash"
LABEL_SOFTWARE = "org.mqbench.software"
LABEL_STANDS_FOR = "org.mqbench.stands-for"
LABEL_VERSION = "org.opencontainers.image.version"
LABEL_SOURCE = "org.opencontainers.image.source"
IMAGE_POLICY_ENV = "MQBENCH_IMAGES"

ImageKind = Literal["official", "local"]
ImagePolicy = Literal["auto", "official", "local"]


@dataclass(frozen=True)
class ImageFacts:
    """An image the engine has."""

    ref: str
    id: str
    labels: Mapping[str, str] = field(default_factory=dict)
    size: int = 0


class ImageEngine(Protocol):
    """What selection and builds need from a Docker engine (``image_engine.SdkEngine``)."""

    def image(self, ref: str) -> ImageFacts | None:
        """The image ``ref`` names, or None when the engine does not have it."""

    def pull(self, ref: str) -> bool:
        """Pull ``ref``; False when it cannot be pulled (no registry, unknown image)."""

    def local_images(self, recipe: str) -> list[ImageFacts]:
        """Images labelled as built from ``recipe``, newest first."""

    def build(
        self, context: bytes, tag: str, build_args: Mapping[str, str], labels: Mapping[str, str]
    ) -> str:
        """Build a tar build context; returns the image id (``BrokerError`` on failure)."""

    def import_rootfs(self, tarball: Path, ref: str) -> str:
        """``docker import`` a rootfs tarball as ``ref``; returns the image id."""


def image_variable(service: str) -> str:
    """The compose variable naming ``service``'s image (``MQBENCH_IMAGE_MOSQUITTO``)."""
    return "MQBENCH_IMAGE_" + "".join(c if c.isalnum() else "_" for c in service.upper())


def repository_of(ref: str) -> str:
    """``eclipse-mosquitto:2.0.20`` -> ``eclipse-mosquitto``; a registry port stays."""
    name = ref.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def software_of(labels: Mapping[str, str]) -> tuple[Software, ...]:
    """The software an image's labels name (local images: every piece; official: the
    image's own version label, when it has one)."""
    raw = labels.get(LABEL_SOFTWARE)
    if raw:
        try:
            items = json.loads(raw)
            return tuple(
                Software(str(i["name"]), str(i["version"]), str(i["source"])) for i in items
            )
        except (ValueError, KeyError, TypeError):
            return ()
    version = labels.get(LABEL_VERSION)
    title = labels.get("org.opencontainers.image.title", "")
    return (Software(title or "image", version, "image label"),) if version else ()


@dataclass(frozen=True)
class ImageChoice:
    """The image one compose service runs, and why."""

    service: str
    requested: str
    """What the compose file (or the user's variable) asks for."""
    ref: str
    """What runs."""
    image_id: str
    kind: ImageKind
    software: tuple[Software, ...] = ()
    pulled: bool = False

    @property
    def variable(self) -> str:
        """The compose variable that names the image."""
        return image_variable(self.service)

    def describe(self) -> dict[str, Any]:
        """Manifest facts."""
        return {
            "requested": self.requested,
            "image": self.ref,
            "image_id": self.image_id,
            "kind": self.kind,
            "pulled": self.pulled,
            "software": [
                {"name": s.name, "version": s.version, "source": s.source} for s in self.software
            ],
        }


def image_policy(env: Mapping[str, str]) -> ImagePolicy:
    """``MQBENCH_IMAGES`` (auto, official or local; default auto)."""
    raw = env.get(IMAGE_POLICY_ENV, "auto").strip().lower() or "auto"
    if raw not in ("auto", "official", "local"):
        raise BrokerError(f"{IMAGE_POLICY_ENV}={raw!r}: expected auto, official or local")
    return raw  # type: ignore[return-value]


@dataclass
class ImageSelector:
    """Chooses images for compose services; remembers failed pulls for its lifetime."""

    engine: ImageEngine
    policy: ImagePolicy = "auto"
    _unpullable: set[str] = field(default_factory=set)

    def choose(self, service: str, requested: str) -> ImageChoice:
        """The image ``service`` runs (``BrokerError`` naming the build command if none)."""
        recipe = recipe_for_repository(repository_of(requested))
        if self.policy == "local" and recipe is not None:
            local = self._local(service, requested, recipe)
            if local is not None:
                return local
        found = self.engine.image(requested)
        if found is not None:
            return ImageChoice(
                service, requested, requested, found.id, "official", software_of(found.labels)
            )
        if self.policy != "local" and self._pull(requested):
            pulled = self.engine.image(requested)
            if pulled is not None:
                return ImageChoice(
                    service,
                    requested,
                    requested,
                    pulled.id,
                    "official",
                    software_of(pulled.labels),
                    pulled=True,
                )
        if self.policy != "official" and recipe is not None:
            local = self._local(service, requested, recipe)
            if local is not None:
                return local
        raise BrokerError(missing_image_message(requested, recipe, self.policy))

    def _pull(self, ref: str) -> bool:
        if ref in self._unpullable:
            return False
        if self.engine.pull(ref):
            return True
        self._unpullable.add(ref)
        return False

    def _local(self, service: str, requested: str, recipe: ImageRecipe) -> ImageChoice | None:
        images = self.engine.local_images(recipe.name)
        if not images:
            return None
        best = images[0]
        return ImageChoice(service, requested, best.ref, best.id, "local", software_of(best.labels))


def missing_image_message(requested: str, recipe: ImageRecipe | None, policy: ImagePolicy) -> str:
    """One line: the image, and how to get one."""
    if recipe is None:
        return (
            f"image {requested} is not here and cannot be pulled, and mqbench cannot build a "
            "local one (no Debian, Maven, PyPI or Go package supplies it; docs/docker.md)"
        )
    if policy == "official":
        return (
            f"image {requested} is not here and cannot be pulled ({IMAGE_POLICY_ENV}=official "
            "forbids the local stand-in; build one with: "
            f"mqbench brokers build-images {recipe.name})"
        )
    return (
        f"image {requested} is not here and cannot be pulled; build a local one with: "
        f"mqbench brokers build-images {recipe.name}"
    )


def choose_images(
    services: Mapping[str, str], selector: ImageSelector
) -> tuple[dict[str, str], dict[str, ImageChoice]]:
    """Choose every service's image: (compose variables to set, choices by service)."""
    variables: dict[str, str] = {}
    choices: dict[str, ImageChoice] = {}
    for service, requested in sorted(services.items()):
        choice = selector.choose(service, requested)
        choices[service] = choice
        variables[choice.variable] = choice.ref
    return variables, choices


# --- build plans -----------------------------------------------------------------------


def buildable_targets() -> list[str]:
    """Recipes a user may name (intermediate layers are built as parents)."""
    return [r.name for r in RECIPE_LIST if not r.intermediate]


def build_order(names: Iterable[str]) -> list[ImageRecipe]:
    """The recipes for ``names`` (all non-intermediate ones when empty) plus their parents,
    parents first, each once; an unknown name is a ``UsageError``."""
    wanted = list(names) or buildable_targets()
    unknown = [n for n in wanted if n not in RECIPES]
    if unknown:
        raise UsageError(
            f"unknown image target(s) {', '.join(unknown)} "
            f"(known: {', '.join(buildable_targets())})"
        )
    needed: set[str] = set()
    for name in wanted:
        current: str | None = name
        while current is not None:
            needed.add(current)
            current = RECIPES[current].parent
    return [r for r in RECIPE_LIST if r.name in needed]


@dataclass(frozen=True)
class BuildResult:
    """What one recipe's step did."""

    recipe: str
    ref: str
    image_id: str
    action: Literal["built", "up-to-date", "imported"]
    seconds: float
    software: tuple[Software, ...] = ()
    size: int = 0


ProgressCallback = Callable[[str], None]
RootfsMaker = Callable[[Path], None]


def context_tar(recipe: ImageRecipe, resolved: Resolved) -> bytes:
    """The build context: the recipe's folder in the repository plus its staged files."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        folder = recipe.context()
        if not (folder / "Dockerfile").is_file():
            raise BrokerError(f"{folder / 'Dockerfile'} is missing")
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            tar.add(path, arcname=str(path.relative_to(folder)), filter=_normalise)
        for made in resolved.generated:
            info = _normalise(tarfile.TarInfo(made.arcname.rstrip("/")))
            info.mode = made.mode
            if made.link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, made.link
                tar.addfile(info)
            elif made.arcname.endswith("/"):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(made.data)
                tar.addfile(info, io.BytesIO(made.data))
        for staged in resolved.files:
            info = tar.gettarinfo(str(staged.source.resolve()), arcname=staged.arcname)
            info.mode = staged.mode
            info = _normalise(info)
            with staged.source.open("rb") as handle:
                tar.addfile(info, handle)
    return buf.getvalue()


def _normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def recipe_hash(context: bytes, resolved: Resolved, parent_id: str) -> str:
    """What decides whether an image must be rebuilt (first 16 hex digits of a SHA-256)."""
    digest = hashlib.sha256()
    digest.update(context)
    digest.update(json.dumps(resolved.build_args, sort_keys=True).encode())
    digest.update(parent_id.encode())
    return digest.hexdigest()[:16]


def image_labels(
    recipe: ImageRecipe, resolved: Resolved, digest: str, parent_software: tuple[Software, ...]
) -> dict[str, str]:
    """Labels of a local image: recipe, hash, version, the software inside, provenance."""
    software = list(resolved.software)
    names = {s.name for s in software}
    software += [s for s in parent_software if s.name not in names]
    return {
        LABEL_RECIPE: recipe.name,
        LABEL_HASH: digest,
        LABEL_VERSION: resolved.version,
        LABEL_STANDS_FOR: ",".join(recipe.stands_for),
        LABEL_SOURCE: f"built by `mqbench brokers build-images` from compose/images/{recipe.name}",
        LABEL_SOFTWARE: json.dumps(
            [{"name": s.name, "version": s.version, "source": s.source} for s in software]
        ),
        "org.opencontainers.image.title": recipe.repository,
        "org.opencontainers.image.description": recipe.description,
    }


def local_tag(recipe: ImageRecipe, resolved: Resolved) -> str:
    """``mqbench-local/<name>:<version>``: a Debian epoch (``1:``) dropped, characters Docker
    refuses in a tag turned into ``_`` (the labels keep the exact version)."""
    epoch, colon, rest = resolved.version.partition(":")
    version = rest if colon and epoch.isdigit() else resolved.version
    tag = "".join(c if c.isalnum() or c in "._-" else "_" for c in version)
    return f"{recipe.repository}:{tag.lstrip('.-')[:128] or 'latest'}"


@dataclass
class ImageBuilder:
    """Builds recipes against an engine; ``host`` and ``make_rootfs`` are injectable."""

    engine: ImageEngine
    host: HostFacts
    make_rootfs: RootfsMaker
    rootfs_cache: Path
    progress: ProgressCallback = lambda _line: None
    clock: Callable[[], float] = time.monotonic
    _done: dict[str, BuildResult] = field(default_factory=dict)

    def resolve_all(self, recipes: list[ImageRecipe]) -> dict[str, Resolved]:
        """Every recipe's inputs, or one ``BrokerError`` listing each missing input."""
        resolved: dict[str, Resolved] = {}
        missing: list[str] = []
        self.host.prefetch_debian(list(DEBIAN_PACKAGES))
        for recipe in recipes:
            try:
                resolved[recipe.name] = recipe.resolve(self.host)
            except MissingInput as exc:
                missing.append(f"{recipe.name}: {exc}")
        if missing:
            raise BrokerError("cannot build images: " + "; ".join(missing))
        return resolved

    def build(self, names: Iterable[str]) -> list[BuildResult]:
        """Build ``names`` and their parents (skipping up-to-date ones)."""
        recipes = build_order(names)
        resolved = self.resolve_all(recipes)
        results: list[BuildResult] = []
        for recipe in recipes:
            result = self._step(recipe, resolved[recipe.name])
            self._done[recipe.name] = result
            results.append(result)
        return results

    def _step(self, recipe: ImageRecipe, resolved: Resolved) -> BuildResult:
        if recipe.name == "debian-rootfs":
            return self._rootfs(recipe, resolved)
        started = self.clock()
        parent = self._done[recipe.parent] if recipe.parent else None
        build_args = dict(resolved.build_args)
        if parent is not None:
            build_args["BASE"] = parent.ref
        resolved = replace(resolved, build_args=build_args)
        context = context_tar(recipe, resolved)
        digest = recipe_hash(context, resolved, parent.image_id if parent else "")
        tag = local_tag(recipe, resolved)
        current = self.engine.image(tag)
        if current is not None and current.labels.get(LABEL_HASH) == digest:
            return BuildResult(
                recipe.name,
                tag,
                current.id,
                "up-to-date",
                self.clock() - started,
                software_of(current.labels),
                current.size,
            )
        self.progress(f"building {tag}")
        labels = image_labels(recipe, resolved, digest, parent.software if parent else ())
        image_id = self.engine.build(context, tag, build_args, labels)
        facts = self.engine.image(tag)
        return BuildResult(
            recipe.name,
            tag,
            image_id,
            "built",
            self.clock() - started,
            software_of(labels),
            facts.size if facts else 0,
        )

    def _rootfs(self, recipe: ImageRecipe, resolved: Resolved) -> BuildResult:
        started = self.clock()
        tag = local_tag(recipe, resolved)
        current = self.engine.image(tag)
        if current is not None:
            return BuildResult(
                recipe.name,
                tag,
                current.id,
                "up-to-date",
                self.clock() - started,
                resolved.software,
                current.size,
            )
        tarball = self.rootfs_cache / f"debian-{resolved.version}-minbase.tar"
        if not tarball.is_file():
            self.progress(f"making a Debian {resolved.version} rootfs with debootstrap ({tarball})")
            self.make_rootfs(tarball)
        self.progress(f"importing {tarball} as {tag}")
        image_id = self.engine.import_rootfs(tarball, tag)
        facts = self.engine.image(tag)
        return BuildResult(
            recipe.name,
            tag,
            image_id,
            "imported",
            self.clock() - started,
            resolved.software,
            facts.size if facts else 0,
        )


def default_policy() -> ImagePolicy:
    """The policy from this process's environment."""
    return image_policy(os.environ)


def image_problem(
    services: Mapping[str, str], engine: ImageEngine, buildable: frozenset[str] = frozenset()
) -> str | None:
    """For ``mqbench targets``: None when every service's image is here (official or
    local), else one line naming the missing images and how to get each. Nothing is pulled;
    services whose compose entry builds its own image (``buildable``) count as here."""
    buildable_missing: list[str] = []
    foreign: list[str] = []
    for service, requested in sorted(services.items()):
        if engine.image(requested) is not None or service in buildable:
            continue
        recipe = recipe_for_repository(repository_of(requested))
        if recipe is None:
            foreign.append(requested)
        elif not engine.local_images(recipe.name):
            buildable_missing.append(
                f"image {requested} is not here (pull it, or build a local one with: "
                f"mqbench brokers build-images {recipe.name})"
            )
    if foreign:
        buildable_missing.append(
            f"image(s) {', '.join(foreign)} not here and mqbench builds no local stand-in "
            "(no Debian, Maven, PyPI or Go package supplies EMQX or TBMQ; pull them where a "
            "registry is reachable; docs/docker.md)"
        )
    return "; ".join(buildable_missing) or None
