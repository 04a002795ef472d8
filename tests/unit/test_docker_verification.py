"""`mqbench targets`' line on what was verified of a target in Docker, from the images its
compose file names and what the engine has (a fake engine)."""

from __future__ import annotations

from collections.abc import Mapping

from mqbench.brokers.docker.images import ImageFacts
from mqbench.brokers.docker.verification import verify


class FakeEngine:
    """Has the images in ``present``; ``local`` maps a recipe to its built image."""

    def __init__(self, present: set[str], local: Mapping[str, str]) -> None:
        self.present = present
        self.local = dict(local)

    def image(self, ref: str) -> ImageFacts | None:
        return ImageFacts(ref, f"sha256:{ref}") if ref in self.present else None

    def pull(self, ref: str) -> bool:
        raise AssertionError("verification never pulls")

    def local_images(self, recipe: str) -> list[ImageFacts]:
        ref = self.local.get(recipe)
        return [ImageFacts(ref, f"sha256:{ref}")] if ref else []


def test_a_target_with_a_local_build_is_run_end_to_end_and_says_which_image_is_here() -> None:
    engine = FakeEngine(set(), {"mosquitto": "mqbench-local/mosquitto:2.0.11"})
    line = verify("mosquitto", {"mosquitto": "eclipse-mosquitto:2.0.20"}, engine).describe()
    assert line == (
        "run end to end in containers by the test suite; mosquitto: local stand-in "
        "mqbench-local/mosquitto:2.0.11 here"
    )


def test_the_official_image_is_preferred_when_the_engine_has_it() -> None:
    engine = FakeEngine({"nats:2.10.22-alpine"}, {"nats": "mqbench-local/nats:2.15.1"})
    (state,) = verify("nats", {"nats": "nats:2.10.22-alpine"}, engine).images
    assert state.describe() == "nats: nats:2.10.22-alpine here"


def test_a_missing_local_image_names_its_build_command() -> None:
    (state,) = verify("nats", {"nats": "nats:2.10.22-alpine"}, FakeEngine(set(), {})).images
    assert state.describe() == (
        "nats: nats:2.10.22-alpine not here (build the stand-in: mqbench brokers build-images nats)"
    )


def test_a_target_without_a_local_build_says_only_its_compose_entry_was_checked() -> None:
    verification = verify("emqx", {"emqx": "emqx/emqx:5.8.6"}, FakeEngine(set(), {}))
    assert not verification.runs_here
    assert verification.describe() == (
        "compose entry checked with `docker compose config` only, never run here: no local "
        "build of its image exists; emqx: emqx/emqx:5.8.6 not here, and no local build exists"
    )
