"""What was verified of a target in Docker, in one line (``mqbench targets``).

Two kinds of target, told apart by the images their compose file names:

- every image has a local build (``image_recipes.py``): the test suite runs the target
  end to end in containers on the real engine (``tests/integration/test_docker_run.py``,
  the conformance suite, and the secured and failure tests where they apply);
- some image has none (EMQX, TBMQ: no Debian, PyPI, Maven or Go package supplies them):
  only the compose entry is checked against the real Compose v2 (``docker compose
  config``, ``tests/integration/test_docker_compose_config.py``), with every part that
  does not need the image (variables, limits, image selection and its one-line refusal);
  the broker itself never ran here.

Which images are on this engine right now is the availability's note (``runtime.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mqbench.brokers.docker.image_recipes import recipe_for_repository
from mqbench.brokers.docker.images import repository_of


@dataclass(frozen=True)
class DockerVerification:
    """What was and was not verified of one target in Docker."""

    target: str
    recipes: tuple[str, ...]
    """The local builds behind its images."""
    unbuildable: tuple[str, ...]
    """Its images that no local build stands in for."""

    @property
    def runs_here(self) -> bool:
        """Every image has a local build: the test suite runs the target in containers."""
        return not self.unbuildable

    def describe(self) -> str:
        """One line for ``mqbench targets``."""
        if self.runs_here:
            return (
                "run end to end in containers by the test suite, on local images "
                f"(mqbench brokers build-images {' '.join(self.recipes)})"
            )
        return (
            "compose entry checked with `docker compose config` only, never run here: no "
            f"local build of {', '.join(self.unbuildable)} exists"
        )


def verify(target: str, images: Mapping[str, str]) -> DockerVerification:
    """``images``: service -> the image its compose file asks for (default variables)."""
    recipes: set[str] = set()
    unbuildable: list[str] = []
    for _service, ref in sorted(images.items()):
        recipe = recipe_for_repository(repository_of(ref))
        if recipe is None:
            unbuildable.append(ref)
        else:
            recipes.add(recipe.name)
    return DockerVerification(target, tuple(sorted(recipes)), tuple(unbuildable))
