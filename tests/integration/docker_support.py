"""Shared set-up of the docker integration tests: an engine that answers, and images.

Import the fixtures into a test module (``from docker_support import docker_engine,
docker_images  # noqa: F401``; tests/integration is on sys.path) or use the functions:

- ``docker_engine`` (session): the engine and compose plugin the docker runtime needs.
  ``scripts/install.sh --dev`` (run by ``scripts/test.sh``) installs and starts both
  (``scripts/install_docker.sh``), so a missing engine FAILS the test with what is missing;
  it never skips (docs/docker.md, "Engine and images").
- ``docker_images`` (session): ``docker_images("mosquitto", "nats")`` makes sure each
  target's image exists, building the local ones that are missing or stale with
  ``mqbench brokers build-images`` (cached by recipe hash: a warm call costs lookups only),
  and returns the ``BuildResult`` per image.
- ``TEST_LABEL``: the label every container a docker test starts by hand should carry, so
  cleanup checks can find exactly those.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from mqbench.brokers.docker.image_engine import SdkEngine, build_local_images
from mqbench.brokers.docker.images import BuildResult
from mqbench.brokers.docker.runtime import DockerRuntime

TEST_LABEL = "org.mqbench.test"
"""Label (``<label>=<test module>``) of containers a docker test starts by hand."""

EnsureImages = Callable[..., dict[str, BuildResult]]

_built: dict[str, BuildResult] = {}


def engine_problem() -> str | None:
    """None when the docker CLI, the compose v2 plugin and an engine answer; else why not."""
    return DockerRuntime().engine_problem()


def require_engine() -> SdkEngine:
    """The engine, or a test failure naming what is missing and how to set it up."""
    problem = engine_problem()
    if problem is not None:
        pytest.fail(
            f"docker tests need an engine and compose v2: {problem} "
            "(scripts/install_docker.sh sets both up)",
            pytrace=False,
        )
    return SdkEngine()


def ensure_images(*targets: str) -> dict[str, BuildResult]:
    """Build (or find up to date) the local images of ``targets`` and their parents."""
    wanted = [t for t in targets if t not in _built]
    if wanted:
        for result in build_local_images(wanted):
            _built[result.recipe] = result
    return {t: _built[t] for t in targets}


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[SdkEngine]:
    """An engine that answers (the test fails, never skips, without one); its SDK
    connections are closed at the session's end."""
    with require_engine() as engine:
        yield engine


@pytest.fixture(scope="session")
def docker_images(docker_engine: SdkEngine) -> Iterator[EnsureImages]:
    """``docker_images(*targets)``: the targets' local images, built once per session."""
    yield ensure_images
