"""HiveMQ Community Edition as a native process: the embedded edition from Maven Central.

``com.hivemq:hivemq-community-edition-embedded`` is started by
``mqbench/brokers/java/launchers/HiveMQLauncher.java`` (``EmbeddedHiveMQ.builder()`` with
config, data and extensions folders in the work directory). See docs/brokers.md.

``conf/config.xml``: one ``tcp-listener`` on 127.0.0.1:<port>; anonymous usage statistics
OFF (on by default: HiveMQ would report to its vendor over the internet); in-memory
persistence (no disk I/O in the measured path; option ``persistence: file`` restores the
default); ``max-queue-size`` 100000 per client (stock 1000, trimmed silently at benchmark
rates, the same reasoning as mosquitto's ``max_queued_messages``). No extension is installed,
so HiveMQ allows every client ("Setting default authentication behavior to ALLOW ALL").
``conf/logback.xml``: console at INFO -> ``<workdir>/hivemq.log``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
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

HIVEMQ_VERSION = "2025.5"
"""Newest ``hivemq-community-edition-embedded`` release Maven Central serves here."""

DISTRIBUTION = JavaDistribution(
    name="hivemq",
    version=HIVEMQ_VERSION,
    artifacts=(Artifact("com.hivemq", "hivemq-community-edition-embedded", HIVEMQ_VERSION),),
    launcher="HiveMQLauncher",
)

DEFAULT_HEAP = "1g"


class HiveMqOptions(BrokerOptionsModel):
    """The HiveMQ options mqbench writes into ``config.xml`` and the JVM's command line."""

    heap: str | None = Field(None, description=f"the JVM's -Xmx (null: {DEFAULT_HEAP})")
    heap_min: str | None = Field(None, description="the JVM's -Xms (null: heap, a fixed heap)")
    persistence: Literal["in-memory", "file"] = Field(
        "in-memory", description="where client sessions and queues live"
    )
    max_queue_size: int = Field(100000, description="messages queued per client")
    queue_strategy: Literal["discard", "discard-oldest"] = Field(
        "discard", description="what goes when a client's queue is full: the new or the oldest"
    )

    @field_validator("heap", "heap_min")
    @classmethod
    def _a_jvm_size(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else check_heap("hivemq", str(info.field_name), value)

    extra_config: str = Field("", description="XML inserted into the hivemq element verbatim")


LOGBACK_XML = """\
<!-- written by mqbench (mqbench/brokers/definitions/hivemq.py) -->
<configuration scan="false">
  <appender name="CONSOLE" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{ISO8601} %-5level - %msg%n%ex</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="CONSOLE"/></root>
  <logger name="jetbrains.exodus" level="WARN"/>
  <logger name="oshi" level="ERROR"/>
  <logger name="com.google.common.util.concurrent.Futures.CombinedFuture" level="OFF"/>
</configuration>
"""


def config_xml(
    host: str, port: int, persistence: str, max_queue_size: int, strategy: str, extra: str
) -> str:
    """HiveMQ's ``config.xml`` for one instance (see the module docstring)."""
    return f"""\
<?xml version="1.0"?>
<!-- written by mqbench (mqbench/brokers/definitions/hivemq.py) -->
<hivemq>
  <listeners>
    <tcp-listener>
      <port>{port}</port>
      <bind-address>{escape(host)}</bind-address>
    </tcp-listener>
  </listeners>
  <mqtt>
    <queued-messages>
      <max-queue-size>{max_queue_size}</max-queue-size>
      <strategy>{escape(strategy)}</strategy>
    </queued-messages>
  </mqtt>
  <persistence>
    <mode>{escape(persistence)}</mode>
  </persistence>
  <anonymous-usage-statistics>
    <enabled>false</enabled>
  </anonymous-usage-statistics>
{extra}
</hivemq>
"""


class HiveMqSpec(MavenJvmSpec):
    """Embedded HiveMQ CE with one loopback TCP listener and no phoning home."""

    options_model = HiveMqOptions
    name = "hivemq"
    distribution = DISTRIBUTION

    def prepare(
        self, binary: Path, workdir: Path, host: str, port: int, options: Mapping[str, Any]
    ) -> LaunchPlan:
        """Write ``conf/config.xml`` and ``conf/logback.xml``; return the launcher argv."""
        opts = parse_options("hivemq", HiveMqOptions, options)
        heap = opts.heap or DEFAULT_HEAP
        heap_min = opts.heap_min or heap
        persistence = opts.persistence
        strategy = opts.queue_strategy
        max_queue = opts.max_queue_size
        base = workdir.resolve()
        conf, data, extensions = (base / d for d in ("conf", "data", "extensions"))
        for directory in (conf, data, extensions):
            directory.mkdir(parents=True, exist_ok=True)
        extra = opts.extra_config.strip()
        xml = config_xml(host, port, persistence, max_queue, strategy, extra)
        check_well_formed("hivemq", xml, extra)
        config_path = conf / "config.xml"
        config_path.write_text(xml, encoding="utf-8")
        (conf / "logback.xml").write_text(LOGBACK_XML, encoding="utf-8")
        argv = self.java_argv(
            binary,
            base,
            heap_min,
            heap,
            {},
            [str(conf), str(data), str(extensions)],
        )
        settings: BrokerSettings = {
            "heap_min": heap_min,
            "heap_max": heap,
            "persistence": persistence,
            "max_queue_size": max_queue,
            "queue_strategy": strategy,
            "anonymous_usage_statistics": False,
            "extensions": [],
            "authentication": "allow all (no extension installed)",
            "artifacts": [a.coordinates for a in DISTRIBUTION.artifacts],
        }
        if extra:
            settings["extra_config"] = extra
        return LaunchPlan(argv=argv, config_path=config_path, config_text=xml, settings=settings)

    def check_ready(self, host: str, port: int, timeout_s: float) -> bool:
        """An MQTT 3.1.1 CONNECT answered by a CONNACK."""
        return mqtt_probe(host, port, timeout_s)


DEFINITION = BrokerDefinition(
    "hivemq",
    (
        TargetDefinition(
            "hivemq",
            "HiveMQ CE",
            "mqtt",
            "HiveMQ Community Edition over MQTT",
            1883,
            native=HiveMqSpec,
            native_source="Maven Central com.hivemq:hivemq-community-edition-embedded "
            "(embedded launcher)",
            compose=ComposeEntry("hivemq.yaml", "hivemq", min_startup_s=120.0),
            docker_security_gap=(
                "mqbench's HiveMQ config has no TLS or users (HiveMQ CE needs a Java keystore in "
                "config.xml and an authentication extension)"
            ),
            knobs=JvmFlags(),
            maven=DISTRIBUTION,
        ),
    ),
)
"""HiveMQ CE: jars from Maven Central, started by ``java/HiveMQLauncher.java``."""
