"""What the JVM brokers share: heap flags and option checks, Maven-fetched jars.

Heap: every JVM broker gets explicit ``-Xms``/``-Xmx`` (recorded as ``heap_min``/``heap_max``
in ``info.settings``), so the JVM's ergonomics (a quarter of the host's RAM) never decide
it silently. Under a resource profile the heap is the profile's (half its memory limit,
``-Xms`` = ``-Xmx``) and ``-XX:ActiveProcessorCount`` is its CPU count, as in the Docker
profiles (``knobs.JvmFlags``, named by each JVM broker's definition); an explicit ``heap``
option together with a profile is refused rather than one of them being ignored.

``MavenJvmSpec`` is the base of brokers run from Maven Central jars
(``mqbench/brokers/java/maven.py``): ``java`` with the broker's jars and a compiled launcher on
the class path, ``-XX:+PrintCommandLineFlags`` (the JVM prints the flags it chose, GC
included, as the first line of the log) and ``java.io.tmpdir`` in the work directory.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from mqbench.brokers.java import maven
from mqbench.brokers.runtime.native_spec import NativeSpec
from mqbench.errors import BrokerError

HEAP_RE = re.compile(r"^\d+[kKmMgG]?$")


def check_heap(broker: str, key: str, value: object) -> str:
    """A JVM size such as ``512m`` or ``2g``; ``BrokerError`` naming the option otherwise."""
    text = str(value)
    if not HEAP_RE.match(text):
        raise BrokerError(f"{broker} option {key}: {text!r} is not a JVM size such as 512m or 2g")
    return text


def check_well_formed(broker: str, xml: str, extra: str) -> None:
    """``BrokerError`` naming ``extra_config`` when the generated XML does not parse."""
    import xml.etree.ElementTree as ET

    try:
        ET.fromstring(xml)
    except ET.ParseError as exc:
        where = "extra_config " if extra else ""
        raise BrokerError(f"{broker} option {where}gives XML that does not parse: {exc}") from exc


class MavenJvmSpec(NativeSpec):
    """A broker run as ``java -cp <launcher>:<jars> <Launcher> ...`` from Maven jars."""

    executable = "java"
    install_hint = maven.INSTALL_HINT
    no_tls = "a Java broker's TLS listener needs a keystore, which mqbench does not make yet"
    no_auth = "a Java broker's users live in its own realm, which mqbench does not configure yet"
    distribution: maven.JavaDistribution

    def find_binary(self) -> Path | None:
        """``java``, once the jars are in the cache and the launcher is or can be compiled."""
        if maven.missing_reason(self.distribution) is not None:
            return None
        return maven.find_tool("java")

    def missing_reason(self) -> str:
        """Which of java, Maven, the jars or javac is missing, and ``scripts/install.sh``."""
        reason = maven.missing_reason(self.distribution)
        return reason or f"{self.name}: java not found; install with: {maven.INSTALL_HINT}"

    def version(self, binary: Path) -> str:
        """The pinned broker version (the launcher prints the one it loaded in the log)."""
        return self.distribution.version

    def installed(self) -> maven.Installed:
        """The fetched jars with a compiled launcher; ``BrokerError`` saying how otherwise."""
        found = maven.installed(self.distribution)
        if found is None:
            raise BrokerError(self.missing_reason())
        maven.compile_launcher(found)
        return found

    def java_argv(
        self,
        binary: Path,
        workdir: Path,
        heap_min: str,
        heap_max: str,
        properties: Mapping[str, str],
        args: list[str],
    ) -> list[str]:
        """``java`` flags, system properties, class path, launcher class and its arguments."""
        found = self.installed()
        tmp = workdir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        props = {"java.io.tmpdir": str(tmp), "java.awt.headless": "true", **properties}
        return [
            str(binary),
            f"-Xms{heap_min}",
            f"-Xmx{heap_max}",
            "-XX:+PrintCommandLineFlags",
            *(f"-D{key}={value}" for key, value in props.items()),
            "-cp",
            found.classpath(),
            self.distribution.launcher,
            *args,
        ]
