"""EMQX 5.8 (the last Apache-2.0 line): Docker only, ``compose/emqx.yaml``.

No registry this machine reaches publishes EMQX, so there is no native spec; the docker
runtime runs the ``emqx`` service, whose thread setting (``ERL_FLAGS`` ``+S N:N``) the
resource profile sets in the compose file (docs/docker.md).
"""

from __future__ import annotations

from mqbench.brokers.definition import BrokerDefinition, TargetDefinition
from mqbench.brokers.docker.compose import ComposeEntry

DEFINITION = BrokerDefinition(
    "emqx",
    (
        TargetDefinition(
            "emqx",
            "EMQX 5.8",
            "mqtt",
            "EMQX 5.8 (last Apache-2.0 line) over MQTT",
            1883,
            docker_only="EMQX is in no registry this machine reaches (no Debian, PyPI, npm or "
            "Maven package; its builds are Docker images and vendor downloads)",
            compose=ComposeEntry("emqx.yaml", "emqx", min_startup_s=120.0),
            docker_security_gap=(
                "mqbench has no EMQX config code to share (its TLS listener and users would come "
                "from EMQX's own environment and bootstrap files)"
            ),
        ),
    ),
)
"""EMQX: Docker only."""
