"""ActiveMQ Artemis as a native process: embedded server from Maven Central jars, MQTT only.

Maven Central serves Artemis's modules (``org.apache.artemis``; the groupId changed from
``org.apache.activemq`` at 2.50.0) but not the ``apache-artemis`` binary distribution, so
mqbench embeds the server: ``artemis-server`` + ``artemis-mqtt-protocol`` (and
``slf4j-simple`` for a log) started by ``mqbench/brokers/java/launchers/ArtemisLauncher.java``
(``EmbeddedActiveMQ`` with a ``broker.xml``). See docs/brokers.md.

``broker.xml`` (in the work directory): persistence off, security off (anonymous clients),
JMX off, one acceptor ``tcp://127.0.0.1:<port>?protocols=MQTT;tcpNoDelay=true``, and the
journal/bindings/paging/large-message directories under ``<workdir>/data``. Everything
else keeps Artemis's defaults (``global-max-size`` = half the heap, then paging).

Logging: ``slf4j-simple`` to stderr -> ``<workdir>/artemis.log``; the audit loggers (one
line per message acknowledged) are set to WARN, as the stock ``log4j2.properties`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from pydantic import Field, ValidationInfo, field_validator

from mqbench.brokers.definition import BrokerDefinition, TargetDefinition
from mqbench.brokers.docker.compose import ComposeEntry
from mqbench.brokers.java.jvm import MavenJvmSpec, check_heap, check_well_formed
from mqbench.brokers.java.maven import Artifact, JavaDistribution
from mqbench.brokers.resources.knobs import JvmFlags
from mqbench.brokers.runtime.native_spec import LaunchPlan
from mqbench.brokers.runtime.options import BrokerOptionsModel, parse_options
from mqbench.brokers.runtime.probes import mqtt_probe
from mqbench.brokers.runtime.settings import BrokerSettings

ARTEMIS_VERSION = "2.55.0"
"""Newest release whose MQTT module Maven Central serves here (2.56.0's server jar resolves,
its ``artemis-mqtt-protocol`` does not)."""
SLF4J_VERSION = "2.0.18"
"""slf4j-simple matching the slf4j-api Artemis 2.55.0 depends on."""

DISTRIBUTION = JavaDistribution(
    name="artemis",
    version=ARTEMIS_VERSION,
    artifacts=(
        Artifact("org.apache.artemis", "artemis-server", ARTEMIS_VERSION),
        Artifact("org.apache.artemis", "artemis-mqtt-protocol", ARTEMIS_VERSION),
        Artifact("org.slf4j", "slf4j-simple", SLF4J_VERSION),
    ),
    launcher="ArtemisLauncher",
)

DEFAULT_HEAP = "1g"


class ArtemisOptions(BrokerOptionsModel):
    """The Artemis options mqbench writes into ``broker.xml`` and the JVM's command line."""

    heap: str | None = Field(None, description=f"the JVM's -Xmx (null: {DEFAULT_HEAP})")
    heap_min: str | None = Field(None, description="the JVM's -Xms (null: heap, a fixed heap)")
    acceptor_params: str = Field(
        "", description="';key=value' pairs appended to the MQTT acceptor URL"
    )
    extra_config: str = Field("", description="XML inserted into the core element verbatim")

    @field_validator("heap", "heap_min")
    @classmethod
    def _a_jvm_size(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else check_heap("artemis", str(info.field_name), value)


LOG_PROPERTIES = {
    "org.slf4j.simpleLogger.defaultLogLevel": "info",
    "org.slf4j.simpleLogger.showDateTime": "true",
    "org.slf4j.simpleLogger.dateTimeFormat": "yyyy-MM-dd'T'HH:mm:ss.SSS",
    "org.slf4j.simpleLogger.log.org.apache.activemq.audit": "warn",
}


def acceptor_url(host: str, port: int, acceptor_params: str = "") -> str:
    """The MQTT acceptor: loopback, MQTT only, Nagle off, plus any extra ``key=value``s."""
    params = "protocols=MQTT;tcpNoDelay=true" + (f";{acceptor_params}" if acceptor_params else "")
    return f"tcp://{host}:{port}?{params}"


def broker_xml(acceptor: str, data: Path, extra: str) -> str:
    """The ``broker.xml`` of one instance (see the module docstring)."""
    return f"""\
<?xml version="1.0" encoding="UTF-8"?>
<!-- written by mqbench (mqbench/brokers/definitions/artemis.py) -->
<configuration xmlns="urn:activemq" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
               xsi:schemaLocation="urn:activemq /schema/artemis-configuration.xsd">
  <core xmlns="urn:activemq:core">
    <name>mqbench</name>
    <persistence-enabled>false</persistence-enabled>
    <security-enabled>false</security-enabled>
    <jmx-management-enabled>false</jmx-management-enabled>
    <journal-directory>{escape(str(data / "journal"))}</journal-directory>
    <bindings-directory>{escape(str(data / "bindings"))}</bindings-directory>
    <paging-directory>{escape(str(data / "paging"))}</paging-directory>
    <large-messages-directory>{escape(str(data / "large-messages"))}</large-messages-directory>
    <acceptors>
      <acceptor name="mqtt">{escape(acceptor)}</acceptor>
    </acceptors>
{extra}
  </core>
</configuration>
"""


class ArtemisSpec(MavenJvmSpec):
    """Embedded Artemis with one loopback MQTT acceptor, no persistence, no security."""

    options_model = ArtemisOptions
    name = "artemis"
    distribution = DISTRIBUTION

    def prepare(
        self, binary: Path, workdir: Path, host: str, port: int, options: Mapping[str, Any]
    ) -> LaunchPlan:
        """Write ``broker.xml`` and return ``java ... ArtemisLauncher broker.xml``."""
        opts = parse_options("artemis", ArtemisOptions, options)
        heap = opts.heap or DEFAULT_HEAP
        heap_min = opts.heap_min or heap
        base = workdir.resolve()
        data = base / "data"
        data.mkdir(parents=True, exist_ok=True)
        acceptor_params = opts.acceptor_params.strip().strip(";")
        extra = opts.extra_config.strip()
        acceptor = acceptor_url(host, port, acceptor_params)
        xml = broker_xml(acceptor, data, extra)
        check_well_formed("artemis", xml, extra)
        config_path = base / "broker.xml"
        config_path.write_text(xml, encoding="utf-8")
        argv = self.java_argv(binary, base, heap_min, heap, LOG_PROPERTIES, [str(config_path)])
        settings: BrokerSettings = {
            "heap_min": heap_min,
            "heap_max": heap,
            "persistence": False,
            "security": False,
            "acceptor": acceptor,
            "global_max_size": "Artemis default: half of -Xmx, then paging",
            "artifacts": [a.coordinates for a in DISTRIBUTION.artifacts],
        }
        if acceptor_params:
            settings["acceptor_params"] = acceptor_params
        if extra:
            settings["extra_config"] = extra
        return LaunchPlan(argv=argv, config_path=config_path, config_text=xml, settings=settings)

    def check_ready(self, host: str, port: int, timeout_s: float) -> bool:
        """An MQTT 3.1.1 CONNECT answered by a CONNACK."""
        return mqtt_probe(host, port, timeout_s)


DEFINITION = BrokerDefinition(
    "artemis",
    (
        TargetDefinition(
            "artemis",
            "ActiveMQ Artemis",
            "mqtt",
            "ActiveMQ Artemis over MQTT",
            1883,
            native=ArtemisSpec,
            native_source="Maven Central org.apache.artemis:artemis-server + "
            "artemis-mqtt-protocol (embedded)",
            compose=ComposeEntry("artemis.yaml", "artemis", min_startup_s=120.0),
            docker_security_gap=(
                "mqbench's Artemis config has no TLS acceptor or users (a Java keystore and JAAS "
                "users in broker.xml would be needed)"
            ),
            knobs=JvmFlags(),
            maven=DISTRIBUTION,
        ),
    ),
)
"""ActiveMQ Artemis: jars from Maven Central, started by ``java/ArtemisLauncher.java``."""
