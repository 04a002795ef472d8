"""Java brokers from Maven: the cache, fetching with (fake) mvn, launcher compile, reasons."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mqbench.brokers.java import maven
from mqbench.brokers.java.maven import Artifact, JavaDistribution
from mqbench.brokers.registry import maven_distributions
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.cli.app import app
from mqbench.errors import BrokerError

DIST = JavaDistribution(
    name="artemis",
    version="9.9.9",
    artifacts=(
        Artifact("org.apache.artemis", "artemis-server", "9.9.9"),
        Artifact("org.slf4j", "slf4j-simple", "2.0.18"),
    ),
    launcher="ArtemisLauncher",
)

FAKE_MVN_OK = """#!/bin/sh
# records its arguments, then "downloads" two jars into -DoutputDirectory
echo "$@" > "$MQBENCH_TEST_ARGS"
for arg in "$@"; do
  case "$arg" in -DoutputDirectory=*) out="${arg#-DoutputDirectory=}";; esac
done
mkdir -p "$out" && touch "$out/artemis-server-9.9.9.jar" "$out/slf4j-simple-2.0.18.jar"
echo "[INFO] BUILD SUCCESS"
"""

FAKE_MVN_MISSING = """#!/bin/sh
echo "[INFO] Scanning for projects..."
echo "[ERROR] Failed to execute goal on project artemis: Could not resolve dependencies: \
Could not find artifact org.apache.artemis:artemis-server:jar:9.9.9 in central"
echo "[ERROR] "
exit 1
"""

FAKE_JAVAC = """#!/bin/sh
# javac -d DIR -cp CP SOURCE: writes DIR/<class>.class
mkdir -p "$2" && touch "$2/$(basename "$5" .java).class"
"""


def tool(bin_dir: Path, name: str, text: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def only_these_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH holds only the test's fake tools (plus sh and friends), JAVA_HOME unset."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sh", "mkdir", "touch", "basename"):
        real = Path("/bin") / name
        (bin_dir / name).symlink_to(real if real.exists() else Path("/usr/bin") / name)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("MQBENCH_TEST_ARGS", str(tmp_path / "mvn-args"))
    return bin_dir


def test_the_pom_lists_exactly_the_pinned_artifacts() -> None:
    root = ET.fromstring(maven.pom_text(DIST))
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    deps = [
        ":".join(
            d.findtext(f"m:{k}", namespaces=ns) or "" for k in ("groupId", "artifactId", "version")
        )
        for d in root.iterfind("m:dependencies/m:dependency", ns)
    ]
    assert deps == [a.coordinates for a in DIST.artifacts]


def test_the_shipped_java_brokers_pin_exact_versions_and_have_launcher_sources() -> None:
    dists = maven_distributions()
    assert set(dists) == {"artemis", "hivemq"}
    for dist in dists.values():
        assert dist.launcher_source.is_file()
        assert dist.launcher_hash()
        for artifact in dist.artifacts:
            assert artifact.version[0].isdigit() and "SNAPSHOT" not in artifact.version


def test_fetch_without_maven_says_how_to_install_it(tmp_path: Path, only_these_tools: Path) -> None:
    with pytest.raises(BrokerError) as excinfo:
        maven.fetch(DIST, root=tmp_path / "cache")
    assert str(excinfo.value) == (
        "cannot fetch artemis 9.9.9: Maven (mvn) is not installed; install with: "
        "scripts/install.sh (or: mqbench brokers fetch) (it runs apt-get install maven)"
    )


def test_an_artifact_maven_cannot_fetch_is_one_line_with_mavens_reason(
    tmp_path: Path, only_these_tools: Path
) -> None:
    tool(only_these_tools, "mvn", FAKE_MVN_MISSING)
    with pytest.raises(BrokerError) as excinfo:
        maven.fetch(DIST, root=tmp_path / "cache")
    message = str(excinfo.value)
    assert message.startswith(
        "cannot fetch artemis 9.9.9 from Maven Central: Failed to execute goal on project "
    )
    assert "Could not find artifact org.apache.artemis:artemis-server:jar:9.9.9" in message
    assert "\n" not in message
    log = tmp_path / "cache" / "artemis-9.9.9.fetch.log"
    assert f"(full output: {log})" in message
    assert "Scanning for projects" in log.read_text()
    assert maven.installed(DIST, tmp_path / "cache") is None
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["artemis-9.9.9.fetch.log"]


def test_fetch_copies_the_runtime_class_path_and_compiles_the_launcher(
    tmp_path: Path, only_these_tools: Path
) -> None:
    tool(only_these_tools, "mvn", FAKE_MVN_OK)
    tool(only_these_tools, "javac", FAKE_JAVAC)
    cache = tmp_path / "cache"
    found = maven.fetch(DIST, root=cache)
    assert found.jars == ("artemis-server-9.9.9.jar", "slf4j-simple-2.0.18.jar")
    args = (tmp_path / "mvn-args").read_text().split()
    assert f"{maven.DEPENDENCY_PLUGIN}:copy-dependencies" in args
    assert "-DincludeScope=runtime" in args
    marker = json.loads((cache / "artemis-9.9.9" / "fetched.json").read_text())
    assert marker["artifacts"] == [a.coordinates for a in DIST.artifacts]
    assert found.launcher_compiled()
    assert found.classpath() == f"{found.launcher_classes}{os.pathsep}{found.lib}/*"
    # A second fetch finds everything in place and runs nothing.
    (only_these_tools / "mvn").unlink()
    assert maven.fetch(DIST, root=cache).jars == found.jars


def test_a_cache_entry_for_other_artifacts_or_with_a_missing_jar_does_not_count(
    tmp_path: Path, only_these_tools: Path
) -> None:
    tool(only_these_tools, "mvn", FAKE_MVN_OK)
    tool(only_these_tools, "javac", FAKE_JAVAC)
    cache = tmp_path / "cache"
    found = maven.fetch(DIST, root=cache)
    other = JavaDistribution("artemis", "9.9.9", DIST.artifacts[:1], "ArtemisLauncher")
    assert maven.installed(other, cache) is None
    (found.lib / "slf4j-simple-2.0.18.jar").unlink()
    assert maven.installed(DIST, cache) is None


def test_the_reason_names_each_missing_tool_and_the_install_script(
    tmp_path: Path, only_these_tools: Path
) -> None:
    reason = maven.missing_reason(DIST, tmp_path / "cache")
    assert reason == (
        "artemis 9.9.9: java is not installed; its jars are not fetched (Maven Central -> "
        f"{tmp_path / 'cache' / 'artemis-9.9.9'}); Maven (mvn) to fetch them is not installed; "
        "javac (a JDK) to compile ArtemisLauncher.java is not installed; install with: "
        "scripts/install.sh (or: mqbench brokers fetch artemis)"
    )


def test_targets_and_run_say_how_to_install_when_maven_and_the_jars_are_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, only_these_tools: Path
) -> None:
    monkeypatch.setenv("MQBENCH_MAVEN_CACHE", str(tmp_path / "empty-cache"))
    runner = CliRunner()
    listing = runner.invoke(app, ["targets"], env={"COLUMNS": "400"})
    assert listing.exit_code == 0, listing.output
    for name in ("hivemq", "artemis"):
        line = next(x for x in listing.output.splitlines() if x.strip().startswith(f"{name}: "))
        assert "Maven (mvn) to fetch them is not installed" in line
        assert line.endswith(f"install with: scripts/install.sh (or: mqbench brokers fetch {name})")
    assert NativeRuntime().availability("hivemq").available is False
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: java\ntargets: [hivemq]\n")
    out = tmp_path / "results"
    result = runner.invoke(app, ["run", str(scenario), "--out", str(out)])
    assert result.exit_code == 1
    assert result.output.startswith(f"error: {scenario}: target 'hivemq': hivemq 2025.5: ")
    assert "install with: scripts/install.sh" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (out / "java").exists()
