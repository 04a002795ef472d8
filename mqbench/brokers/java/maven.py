"""Java brokers from Maven Central: pinned artifacts, a local cache, and compiled launchers.

HiveMQ CE and ActiveMQ Artemis have no Debian or PyPI package; both publish embeddable
jars on Maven Central. A ``JavaDistribution`` pins a broker's artifacts (exact versions) and
names the small launcher (``mqbench/brokers/java/<Launcher>.java``) that starts it.

``fetch`` writes a throw-away ``pom.xml`` listing the artifacts, runs the machine's ``mvn``
(``dependency:copy-dependencies`` with a pinned plugin version) and copies every jar of the
runtime class path into ``<cache>/<name>-<version>/lib``; ``fetched.json`` there records
what was fetched. The cache is ``$MQBENCH_MAVEN_CACHE``, else
``$XDG_CACHE_HOME/mqbench/maven`` (``~/.cache/mqbench/maven``). ``scripts/install.sh`` runs
``mqbench brokers fetch``; runs never download anything.

The launcher is compiled once per source version with ``javac`` into
``<cache>/<name>-<version>/launcher-<sha256 prefix>/`` and run as a class, not as a
single-file source program: ``java Launcher.java`` keeps the compiler loaded inside the
broker's JVM (measured here: +50-60 MB RSS and ~1 s more start-up for Artemis), which would
bias the memory comparison between brokers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from mqbench.errors import BrokerError

CACHE_ENV = "MQBENCH_MAVEN_CACHE"
"""Overrides the cache directory of fetched Java brokers."""
INSTALL_HINT = "scripts/install.sh (or: mqbench brokers fetch)"
"""How a user gets the jars (and Maven and a JDK) onto the machine."""
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
"""Pinned so the copy step does not depend on Maven's default plugin version."""
MARKER = "fetched.json"
MARKER_SCHEMA = 1
FETCH_TIMEOUT_S = 900.0
COMPILE_TIMEOUT_S = 120.0
LAUNCHER_DIR = Path(__file__).parent / "launchers"
"""Where the launcher sources live (shipped with the package)."""


@dataclass(frozen=True)
class Artifact:
    """One Maven artifact (jar), with an exact version."""

    group: str
    artifact: str
    version: str

    @property
    def coordinates(self) -> str:
        """``group:artifact:version``."""
        return f"{self.group}:{self.artifact}:{self.version}"


@dataclass(frozen=True)
class JavaDistribution:
    """A broker that runs from Maven jars plus a launcher class."""

    name: str
    """Short name, e.g. ``artemis``; the cache directory is ``<name>-<version>``."""
    version: str
    """The broker's version (what the manifest reports)."""
    artifacts: tuple[Artifact, ...]
    """Direct dependencies; their transitive runtime dependencies are fetched too."""
    launcher: str
    """Class name of the launcher; its source is ``mqbench/brokers/java/<launcher>.java``."""

    @property
    def key(self) -> str:
        """Cache directory name."""
        return f"{self.name}-{self.version}"

    @property
    def launcher_source(self) -> Path:
        """The launcher's Java source file."""
        return LAUNCHER_DIR / f"{self.launcher}.java"

    def launcher_hash(self) -> str:
        """First 12 hex digits of the launcher source's SHA-256 ('' when it is missing)."""
        try:
            return hashlib.sha256(self.launcher_source.read_bytes()).hexdigest()[:12]
        except OSError:
            return ""


@dataclass(frozen=True)
class Installed:
    """A distribution found complete in the cache."""

    dist: JavaDistribution
    directory: Path
    jars: tuple[str, ...]

    @property
    def lib(self) -> Path:
        """Folder of the jars."""
        return self.directory / "lib"

    @property
    def launcher_classes(self) -> Path:
        """Folder of the compiled launcher for the current launcher source."""
        return self.directory / f"launcher-{self.dist.launcher_hash()}"

    def launcher_compiled(self) -> bool:
        """True when the current launcher source has been compiled."""
        return (self.launcher_classes / f"{self.dist.launcher}.class").is_file()

    def classpath(self) -> str:
        """Launcher classes first, then every jar (``lib/*`` as the JVM expands it)."""
        return f"{self.launcher_classes}{os.pathsep}{self.lib}/*"


def cache_root() -> Path:
    """Where fetched distributions live (see the module docstring)."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "mqbench" / "maven"


def find_tool(name: str) -> Path | None:
    """``$JAVA_HOME/bin/<name>`` for java/javac when set, else ``name`` on ``PATH``."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and name in ("java", "javac"):
        candidate = Path(java_home) / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    return Path(found) if found else None


def installed(dist: JavaDistribution, root: Path | None = None) -> Installed | None:
    """The distribution if its marker matches the pinned artifacts and every jar exists."""
    directory = (root or cache_root()) / dist.key
    try:
        marker = json.loads((directory / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("schema") != MARKER_SCHEMA:
        return None
    if marker.get("artifacts") != [a.coordinates for a in dist.artifacts]:
        return None
    jars = marker.get("jars")
    if not isinstance(jars, list) or not jars:
        return None
    if not all(isinstance(j, str) and (directory / "lib" / j).is_file() for j in jars):
        return None
    return Installed(dist, directory, tuple(jars))


def missing_reason(dist: JavaDistribution, root: Path | None = None) -> str | None:
    """One line saying what is missing to run ``dist`` and how to install it; None if ready."""
    found = installed(dist, root)
    needs: list[str] = []
    if find_tool("java") is None:
        needs.append("java is not installed")
    if found is None:
        where = (root or cache_root()) / dist.key
        needs.append(f"its jars are not fetched (Maven Central -> {where})")
        if find_tool("mvn") is None:
            needs.append("Maven (mvn) to fetch them is not installed")
    if (found is None or not found.launcher_compiled()) and find_tool("javac") is None:
        needs.append(f"javac (a JDK) to compile {dist.launcher}.java is not installed")
    if not needs:
        return None
    return (
        f"{dist.name} {dist.version}: {'; '.join(needs)}; "
        f"install with: scripts/install.sh (or: mqbench brokers fetch {dist.name})"
    )


def pom_text(dist: JavaDistribution) -> str:
    """A minimal ``pom.xml`` whose dependencies are the distribution's artifacts."""
    deps = "\n".join(
        "    <dependency>"
        f"<groupId>{escape(a.group)}</groupId>"
        f"<artifactId>{escape(a.artifact)}</artifactId>"
        f"<version>{escape(a.version)}</version>"
        "</dependency>"
        for a in dist.artifacts
    )
    return f"""\
<?xml version="1.0" encoding="UTF-8"?>
<!-- written by mqbench (mqbench/brokers/java/maven.py): the jars of {escape(dist.key)} -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>mqbench.runtime</groupId>
  <artifactId>{escape(dist.name)}</artifactId>
  <version>{escape(dist.version)}</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


def _first_error(output: str) -> str:
    """Maven's first ``[ERROR]`` line without the prefix (or the last non-empty line)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("[ERROR]"):
            text = line.removeprefix("[ERROR]").strip()
            if text:
                return text
    return lines[-1] if lines else "no output"


def fetch(
    dist: JavaDistribution,
    *,
    root: Path | None = None,
    mvn: Path | None = None,
    timeout_s: float = FETCH_TIMEOUT_S,
) -> Installed:
    """Fetch the distribution's jars with Maven into the cache and compile its launcher.

    Already complete: only compiles the launcher if needed. Raises ``BrokerError`` with one
    line (Maven missing, an artifact that cannot be resolved, a timeout); the full Maven
    output stays in ``<cache>/<name>-<version>.fetch.log``.
    """
    base = root or cache_root()
    found = installed(dist, base)
    if found is None:
        tool = mvn or find_tool("mvn")
        if tool is None:
            raise BrokerError(
                f"cannot fetch {dist.name} {dist.version}: Maven (mvn) is not installed; "
                f"install with: {INSTALL_HINT} (it runs apt-get install maven)"
            )
        found = _download(dist, base, tool, timeout_s)
    compile_launcher(found)
    return found


def _download(dist: JavaDistribution, base: Path, mvn: Path, timeout_s: float) -> Installed:
    try:
        base.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{dist.key}-", dir=base))
    except OSError as exc:
        raise BrokerError(f"cannot create the Maven cache {base}: {exc}") from exc
    log_path = base / f"{dist.key}.fetch.log"
    try:
        (work / "pom.xml").write_text(pom_text(dist), encoding="utf-8")
        argv = [
            str(mvn),
            "-B",
            "-U",
            "-ntp",
            "-f",
            str(work / "pom.xml"),
            f"{DEPENDENCY_PLUGIN}:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={work / 'lib'}",
        ]
        try:
            proc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BrokerError(
                f"cannot fetch {dist.name} {dist.version}: mvn did not finish within "
                f"{timeout_s:g} s"
            ) from exc
        except OSError as exc:
            raise BrokerError(f"cannot fetch {dist.name} {dist.version}: {mvn}: {exc}") from exc
        output = proc.stdout.decode("utf-8", "replace")
        with contextlib.suppress(OSError):
            log_path.write_text(" ".join(argv) + "\n" + output, encoding="utf-8")
        jars = sorted(p.name for p in (work / "lib").glob("*.jar"))
        if proc.returncode != 0 or not jars:
            raise BrokerError(
                f"cannot fetch {dist.name} {dist.version} from Maven Central: "
                f"{_first_error(output)} (full output: {log_path})"
            )
        marker = {
            "schema": MARKER_SCHEMA,
            "name": dist.name,
            "version": dist.version,
            "artifacts": [a.coordinates for a in dist.artifacts],
            "jars": jars,
            "fetched_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "plugin": DEPENDENCY_PLUGIN,
        }
        (work / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        work.chmod(0o755)  # mkdtemp makes it private; the cache is readable like ~/.m2
        target = base / dist.key
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    except OSError as exc:
        raise BrokerError(f"cannot write {dist.key} into the Maven cache {base}: {exc}") from exc
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    found = installed(dist, base)
    if found is None:
        raise BrokerError(f"{dist.key} was fetched into {base} but is incomplete")
    return found


def compile_launcher(found: Installed, javac: Path | None = None) -> Path:
    """Compile the launcher for the current source unless done; returns its class folder.

    Compiles into a temporary folder renamed into place, so concurrent runs never see a
    half-written class.
    """
    classes = found.launcher_classes
    if found.launcher_compiled():
        return classes
    tool = javac or find_tool("javac")
    if tool is None:
        raise BrokerError(
            f"cannot compile {found.dist.launcher}.java: javac (a JDK) is not installed; "
            f"install with: {INSTALL_HINT}"
        )
    source = found.dist.launcher_source
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".launcher-", dir=found.directory))
    except OSError as exc:
        raise BrokerError(f"cannot compile {source.name} into {found.directory}: {exc}") from exc
    try:
        argv = [str(tool), "-d", str(tmp), "-cp", f"{found.lib}/*", str(source)]
        try:
            proc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=COMPILE_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BrokerError(f"cannot compile {source.name}: {exc}") from exc
        if proc.returncode != 0:
            first = proc.stdout.decode("utf-8", "replace").strip().splitlines()[:1]
            raise BrokerError(
                f"cannot compile {source.name} against {found.lib}: "
                f"{first[0] if first else f'javac exit {proc.returncode}'}"
            )
        try:
            tmp.chmod(0o755)
            tmp.rename(classes)
        except OSError:
            if not found.launcher_compiled():  # not a concurrent compile that won the race
                raise
    except OSError as exc:
        raise BrokerError(f"cannot compile {source.name} into {classes}: {exc}") from exc
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return classes
