"""What a running Artemis broker holds, for benchmarks that hunt its stale consumers
(``session_takeover.py --inspect``; docs/findings.md, "Artemis loses messages at QoS 1 after
rapid reconnects").

Two sources, both outside the broker's MQTT port:

- Artemis's own management views (``listConsumers``, ``listSessions``, ``listConnections``)
  over JMX, read by ``ArtemisInspect.java`` (compiled once per run with ``javac``), which
  attaches to the broker's JVM. A consumer row gives the queue, the remote address of the
  connection that owns it, its creation time and a status: ``Orphaned`` when its connection
  is no longer one the broker's remoting service holds.
- ``jcmd <pid> GC.class_histogram``: live instances (after a full GC) of the classes that
  make up an MQTT client on the broker.

JMX management is off in mqbench's ``broker.xml`` and Artemis 2.55.0 embedded ignores a
``-Dbrokerconfig.jmxManagementEnabled=true`` override (tried: no MBean registered), so
``jmx_on()`` has mqbench write ``<jmx-management-enabled>true`` instead of ``false`` while
a broker starts; the rest of ``broker.xml`` is unchanged. ``INSPECT_JVM_OPTIONS`` (given
through ``JAVA_TOOL_OPTIONS``) turns the MQTT package's debug log on, for the
link-stealing lines.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mqbench.brokers.definitions import artemis
from mqbench.brokers.java.maven import find_tool

SOURCE = Path(__file__).with_name("ArtemisInspect.java")
INSPECT_JVM_OPTIONS = (
    "-Dorg.slf4j.simpleLogger.log.org.apache.activemq.artemis.core.protocol.mqtt=debug"
)
JMX_OFF = "<jmx-management-enabled>false</jmx-management-enabled>"
JMX_ON = "<jmx-management-enabled>true</jmx-management-enabled>"
LIVE_CLASSES = {
    "org.apache.activemq.artemis.core.server.impl.ServerConsumerImpl": "ServerConsumerImpl",
    "org.apache.activemq.artemis.core.server.impl.ServerSessionImpl": "ServerSessionImpl",
    "org.apache.activemq.artemis.core.protocol.mqtt.MQTTSession": "MQTTSession",
    "org.apache.activemq.artemis.core.protocol.mqtt.MQTTConnection": "MQTTConnection",
}
TIMEOUT_S = 60


@contextmanager
def jmx_on() -> Iterator[None]:
    """Artemis brokers started inside have JMX management on (see the module docstring)."""
    original = artemis.broker_xml

    def with_jmx(acceptor: str, data: Path, extra: str) -> str:
        xml: str = original(acceptor, data, extra)
        if JMX_OFF not in xml:
            raise SystemExit("--inspect: mqbench's broker.xml no longer has JMX switched off")
        return xml.replace(JMX_OFF, JMX_ON)

    artemis.broker_xml = with_jmx
    try:
        yield
    finally:
        artemis.broker_xml = original


@dataclass
class Inspection:
    """One look at the broker."""

    consumers: list[dict[str, Any]]
    """Rows of Artemis's consumer view on the queue asked about."""
    connections: set[str] = field(default_factory=set)
    """Remote addresses of the connections the broker's remoting service holds."""
    live: dict[str, int] = field(default_factory=dict)
    """Live instances per class of ``LIVE_CLASSES`` (whole broker, all trials so far)."""
    errors: list[str] = field(default_factory=list)


class Inspector:
    """Looks into the Artemis JVM ``pid`` (compiles ``ArtemisInspect.java`` into ``scratch``)."""

    def __init__(self, pid: int, scratch: Path) -> None:
        javac, java = find_tool("javac"), find_tool("java")
        if javac is None or java is None:
            raise SystemExit("--inspect needs a JDK (javac, java and jcmd on PATH)")
        self.pid = pid
        self.java = java
        self.jcmd = java.resolve().parent / "jcmd"
        self.classes = scratch
        subprocess.run([str(javac), "-d", str(scratch), str(SOURCE)], check=True, timeout=TIMEOUT_S)

    def snapshot(self, queue: str) -> Inspection:
        """The consumers on ``queue``, the connections held, and the live-object counts."""
        views = self.views()
        consumers = [row for row in rows(views, "consumers") if queue in row.values()]
        held = {str(row.get("remoteAddress")) for row in rows(views, "connections")}
        return Inspection(consumers, held, self.histogram(), list(views.get("errors", [])))

    def views(self) -> dict[str, Any]:
        """``ArtemisInspect``'s JSON (``{"errors": [...]}`` when it failed)."""
        done = subprocess.run(
            [str(self.java), "-cp", str(self.classes), "ArtemisInspect", str(self.pid)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            return {"errors": [done.stderr.strip()[-500:] or f"exit {done.returncode}"]}
        parsed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return parsed

    def histogram(self) -> dict[str, int]:
        """Live instances of ``LIVE_CLASSES`` (``jcmd GC.class_histogram`` runs a full GC)."""
        done = subprocess.run(
            [str(self.jcmd), str(self.pid), "GC.class_histogram"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        counts = dict.fromkeys(LIVE_CLASSES.values(), 0)
        for line in done.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[0].endswith(":") and parts[3] in LIVE_CLASSES:
                counts[LIVE_CLASSES[parts[3]]] += int(parts[1])
        return counts


def rows(views: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The ``data`` rows of one of Artemis's views (none when the view failed)."""
    view = views.get(key)
    data = view.get("data", []) if isinstance(view, dict) else []
    return [row for row in data if isinstance(row, dict)]


def port_of(address: object) -> int | None:
    """The port of ``/127.0.0.1:54321`` or ``127.0.0.1:54321``."""
    match = re.search(r":(\d+)$", str(address))
    return int(match.group(1)) if match else None


def link_stealing(log: Path, cid: str) -> list[tuple[str, int | None, int | None]]:
    """The broker's debug lines, in log order, where a CONNECT for ``cid`` closed an earlier
    connection or was refused for one: ("<time> <thread> steals|refused", the earlier
    connection's port, the new one's)."""
    pattern = re.compile(
        r"^(?P<time>\S+) \[(?P<thread>[^\]]*)\].*?(?P<verb>Existing|Incoming) MQTT session"
        r" from (?P<a>\S+) closed due to (?:incoming|existing) session from (?P<b>\S+) with"
        r" the same client ID: (?P<cid>\S+)",
        re.MULTILINE,
    )
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found = []
    for match in pattern.finditer(text):
        if match["cid"] != cid:
            continue
        a, b = port_of(match["a"]), port_of(match["b"])
        when = f"{match['time'].partition('T')[2] or match['time']} {match['thread']}"
        if match["verb"] == "Existing":
            found.append((f"{when}: steals", a, b))
        else:
            found.append((f"{when}: refused", b, a))
    return found
