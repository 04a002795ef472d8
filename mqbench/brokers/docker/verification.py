"""What was verified of a target in Docker on this machine, in one line (``mqbench targets``).

Two kinds of target, told apart by the images their compose file names:

- every image has a local build (``image_recipes.py``): the test suite runs the target
  end to end in containers on this engine (``tests/integration/test_docker_run.py``,
  the conformance suite, the secured and failure tests where they apply);
- some image has none (EMQX, TBMQ: no Debian, PyPI, Maven or Go package supplies them):
  only the compose entry was checked against the real Compose v2 (``docker compose
  config``, ``tests/integration/test_docker_compose_config.py``) with every part that
  does not need the image (variables, limits, image selection and its one-line refusal);
  the broker itself never ran here.

And, per service, whether its image is here now: the official one, the local stand-in, or
neither (with the command that builds it, or the fact that nothing here can).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mqbench.brokers.docker.image_recipes import recipe_for_repository
from mqbench.brokers.docker.images import ImageEngine, repository_of


@dataclass(frozen=True)
class ImageState:
    """One service's image on this engine."""

    service: str
    requested: str
    here: str | None
    """The image that would run (the official one, else the local stand-in); None: none."""
    recipe: str | None
    """The local build that stands in for it (``mqbench brokers build-images <recipe>``)."""

    def describe(self) -> str:
        """``<service>: <what is here>``."""
        if self.here == self.requested:
            return f"{self.service}: {self.requested} here"
        if self.here is not None:
            return f"{self.service}: local stand-in {self.here} here"
        if self.recipe is not None:
            return (
                f"{self.service}: {self.requested} not here (build the stand-in: "
                f"mqbench brokers build-images {self.recipe})"
            )
        return f"{self.service}: {self.requested} not here, and no local build exists"


@dataclass(frozen=True)
class DockerVerification:
    """What was and was not verified of one target in Docker here."""

    target: str
    images: tuple[ImageState, ...]

    @property
    def runs_here(self) -> bool:
        """Every image has a local build: the test suite runs the target in containers."""
        return all(state.recipe is not None for state in self.images)

    def describe(self) -> str:
        """One line for ``mqbench targets``."""
        images = "; ".join(state.describe() for state in self.images)
        if self.runs_here:
            return f"run end to end in containers by the test suite; {images}"
        return (
            "compose entry checked with `docker compose config` only, never run here: no "
            f"local build of its image exists; {images}"
        )


def verify(target: str, images: Mapping[str, str], engine: ImageEngine) -> DockerVerification:
    """``images``: service -> the image its compose file asks for (default variables)."""
    states = []
    for service, ref in sorted(images.items()):
        recipe = recipe_for_repository(repository_of(ref))
        here: str | None = ref if engine.image(ref) is not None else None
        if here is None and recipe is not None:
            local = engine.local_images(recipe.name)
            here = local[0].ref if local else None
        states.append(ImageState(service, ref, here, recipe.name if recipe else None))
    return DockerVerification(target, tuple(states))
