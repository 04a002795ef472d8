"""ActiveMQ Classic 5.17 as a native process (Debian package ``activemq``), MQTT only.

The Debian package ships the broker's jars in ``/usr/share/activemq`` and an init script
meant for ``/var/lib/activemq/<instance>``; mqbench instead runs the JVM directly with an
instance of its own in the work directory (see docs/brokers.md):

- ``activemq.base``/``activemq.conf``/``activemq.data`` and ``java.io.tmpdir`` point into
  the work directory; ``conf/activemq.xml`` has a single transport connector,
  ``mqtt://127.0.0.1:<port>``. No OpenWire, no JMX, no web console, no advisories, no
  scheduler, ``persistent="false"`` (memory store; MQTT QoS 1 then means "acknowledged by
  the broker", not "on disk").
- The MQTT protocol module needs the FuseSource ``mqtt-client`` jar (its codec) and
  ``hawtdispatch``/``hawtdispatch-transport`` (Debian ``libmqtt-client-java`` and
  ``libhawtdispatch-java``), which are not on the broker's class path by default: without
  them CONNECT hangs with ``NoClassDefFoundError``. ActiveMQ's launcher adds
  ``${activemq.base}/lib`` to the class path, so the spec symlinks the jars there.
- Logging: ``conf/log4j.properties`` (log4j 1.2, as bound by the Debian slf4j jars) writes
  to stdout, which the runtime redirects into ``<workdir>/activemq.log``.
- JVM: ``-Xms64m -Xmx512m`` by default (option ``heap``); broker memory usage limit 256 MB
  (option ``memory_limit_mb``), below the heap so the broker does not reset it with a warning.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from pydantic import Field, field_validator

from mqbench.brokers.definition import BrokerDefinition, TargetDefinition
from mqbench.brokers.docker.compose import ComposeEntry
from mqbench.brokers.java.jvm import check_heap
from mqbench.brokers.resources.knobs import JvmFlags
from mqbench.brokers.runtime.native_spec import LaunchPlan, NativeSpec, first_match
from mqbench.brokers.runtime.options import BrokerOptionsModel, parse_options
from mqbench.brokers.runtime.probes import mqtt_probe
from mqbench.brokers.runtime.settings import BrokerSettings
from mqbench.errors import BrokerError

ACTIVEMQ_HOME = Path("/usr/share/activemq")
LAUNCHER_JAR = ACTIVEMQ_HOME / "bin" / "activemq.jar"
JAVA_DIR = Path("/usr/share/java")
MQTT_JARS = ("mqtt-client.jar", "hawtdispatch.jar", "hawtdispatch-transport.jar")
"""Jars the MQTT connector needs besides ActiveMQ's own (from ``/usr/share/java``)."""


class ActiveMqOptions(BrokerOptionsModel):
    """The ActiveMQ options mqbench writes into ``activemq.xml`` and the JVM's command line."""

    heap: str = Field("512m", description="the JVM's -Xmx")
    memory_limit_mb: int = Field(256, description="systemUsage memoryUsage limit, MB")
    max_connections: int = Field(20000, description="maximumConnections of the MQTT connector")
    default_keep_alive_ms: int = Field(
        60000, description="keep-alive of MQTT clients that send none, ms"
    )
    extra_config: str = Field("", description="XML inserted into the broker element verbatim")

    @field_validator("heap")
    @classmethod
    def _a_jvm_size(cls, value: str) -> str:
        return check_heap("activemq", "heap", value)


LOG4J_PROPERTIES = """\
# written by mqbench (mqbench/brokers/definitions/activemq.py)
log4j.rootLogger=INFO, console
log4j.logger.org.springframework=WARN
log4j.logger.org.apache.xbean=WARN
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} | %-5p | %m | %c | %t%n
"""


def missing_mqtt_jars(java_dir: Path | None = None) -> list[str]:
    """The jars of :data:`MQTT_JARS` not found in ``java_dir`` (default :data:`JAVA_DIR`)."""
    directory = JAVA_DIR if java_dir is None else java_dir
    return [jar for jar in MQTT_JARS if not (directory / jar).is_file()]


class ActiveMqSpec(NativeSpec):
    """ActiveMQ Classic with one MQTT connector on loopback and an in-memory store."""

    options_model = ActiveMqOptions
    name = "activemq"
    executable = "activemq (/usr/share/activemq) with java and libmqtt-client-java"
    install_hint = "apt-get install activemq libmqtt-client-java"
    no_tls = "a Java broker's TLS listener needs a keystore, which mqbench does not make yet"
    no_auth = "a Java broker's users live in its own realm, which mqbench does not configure yet"

    def candidate_paths(self) -> Iterable[Path]:
        """``$JAVA_HOME/bin/java`` when set, then ``java`` on ``PATH``."""
        java_home = os.environ.get("JAVA_HOME")
        if java_home:
            yield Path(java_home) / "bin" / "java"
        found = shutil.which("java")
        if found:
            yield Path(found)

    def find_binary(self) -> Path | None:
        """``java``, provided ActiveMQ's launcher jar and the MQTT jars are installed."""
        if not LAUNCHER_JAR.is_file() or missing_mqtt_jars():
            return None
        for candidate in self.candidate_paths():
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
        return None

    def version(self, binary: Path) -> str:
        """From the broker jar's name in Debian's maven repo, else from its manifest."""
        broker_jar = ACTIVEMQ_HOME / "lib" / "activemq-broker.jar"
        with_version = first_match(r"activemq-broker-(\d[\w.]*)\.jar", _resolve(broker_jar))
        if with_version != "unknown":
            return with_version
        return _jar_version(broker_jar)

    def prepare(
        self, binary: Path, workdir: Path, host: str, port: int, options: Mapping[str, Any]
    ) -> LaunchPlan:
        """Write the instance (conf, lib symlinks, data) and return the ``java -jar`` argv."""
        opts = parse_options("activemq", ActiveMqOptions, options)
        missing = missing_mqtt_jars()
        if missing:
            raise BrokerError(
                f"ActiveMQ's MQTT connector needs {', '.join(missing)} in {JAVA_DIR}; "
                f"install it with: {self.install_hint}"
            )
        base = workdir.resolve()
        conf, data, lib, tmp = (base / d for d in ("conf", "data", "lib", "tmp"))
        for directory in (conf, data, lib, tmp):
            directory.mkdir(parents=True, exist_ok=True)
        for jar in MQTT_JARS:
            link = lib / jar
            if not link.exists():
                link.symlink_to(JAVA_DIR / jar)
        uri = (
            f"mqtt://{host}:{port}?maximumConnections={opts.max_connections}"
            f"&transport.defaultKeepAlive={opts.default_keep_alive_ms}"
        )
        extra = opts.extra_config.strip()
        xml = f"""\
<!-- written by mqbench (mqbench/brokers/definitions/activemq.py) -->
<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans
    http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
    http://activemq.apache.org/schema/core
    http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="mqbench"
          useJmx="false" persistent="false" advisorySupport="false"
          schedulerSupport="false" dataDirectory={quoteattr(str(data))}>
    <systemUsage>
      <systemUsage>
        <memoryUsage><memoryUsage limit="{opts.memory_limit_mb} mb"/></memoryUsage>
      </systemUsage>
    </systemUsage>
    <transportConnectors>
      <transportConnector name="mqtt" uri={quoteattr(uri)}/>
    </transportConnectors>
{extra}
  </broker>
</beans>
"""
        config_path = conf / "activemq.xml"
        config_path.write_text(xml, encoding="utf-8")
        (conf / "log4j.properties").write_text(LOG4J_PROPERTIES, encoding="utf-8")
        heap = opts.heap
        argv = [
            str(binary),
            "-Xms64m",
            f"-Xmx{heap}",
            "-Djava.awt.headless=true",
            f"-Dactivemq.home={ACTIVEMQ_HOME}",
            f"-Dactivemq.base={base}",
            f"-Dactivemq.conf={conf}",
            f"-Dactivemq.data={data}",
            f"-Djava.io.tmpdir={tmp}",
            f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
            "-jar",
            str(LAUNCHER_JAR),
            "start",
            f"xbean:file:{config_path}",
        ]
        settings: BrokerSettings = {
            "heap_min": "64m",
            "heap_max": heap,
            "memory_limit_mb": opts.memory_limit_mb,
            "max_connections": opts.max_connections,
            "default_keep_alive_ms": opts.default_keep_alive_ms,
            "persistent": False,
            "connectors": ["mqtt"],
            "anonymous": True,
        }
        if extra:
            settings["extra_config"] = extra
        return LaunchPlan(argv=argv, config_path=config_path, config_text=xml, settings=settings)

    def check_ready(self, host: str, port: int, timeout_s: float) -> bool:
        """An MQTT 3.1.1 CONNECT answered by a CONNACK (the MQTT codec is loaded)."""
        return mqtt_probe(host, port, timeout_s)


def _resolve(path: Path) -> str:
    try:
        return str(path.resolve())
    except OSError:
        return ""


def _jar_version(jar: Path) -> str:
    import zipfile

    try:
        with zipfile.ZipFile(jar) as archive:
            manifest = archive.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return "unknown"
    return first_match(r"(?:Implementation|Bundle)-Version:\s*(\S+)", manifest)


DEFINITION = BrokerDefinition(
    "activemq",
    (
        TargetDefinition(
            "activemq",
            "ActiveMQ Classic 5.17",
            "mqtt",
            "ActiveMQ Classic 5.17 over MQTT (an extra, not Artemis)",
            1883,
            native=ActiveMqSpec,
            native_source="Debian package activemq",
            compose=ComposeEntry("activemq.yaml", "activemq", min_startup_s=120.0),
            docker_security_gap=(
                "mqbench's ActiveMQ config has no TLS connector or users (a Java keystore and a "
                "users plugin in activemq.xml would be needed)"
            ),
            knobs=JvmFlags(),
        ),
    ),
)
"""ActiveMQ Classic: a JVM broker (processor count and heap from the profile)."""
