"""TBMQ 2.x with Kafka, Valkey and PostgreSQL: Docker only, ``compose/tbmq.yaml``.

Besides ``compose up``, the docker runtime runs this target's hooks (``TbmqHooks``):

- option ``tbmq_credentials`` (a list of ``username``, ``password``, optional
  ``client_type`` DEVICE|APPLICATION and ``client_id``) is checked before anything starts;
  given, it turns TBMQ's MQTT basic authentication on (``MQBENCH_TBMQ_BASIC_AUTH=true``),
  otherwise every client connects without credentials as a DEVICE client;
- once the project is healthy, the hook waits until ``/actuator/health`` says UP on the
  published HTTP port and creates the credentials over the REST API
  (``mqbench/brokers/services/tbmq_api.py``); the manifest records the user names and client types.

docs/docker.md (TBMQ) explains why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mqbench.brokers.definition import (
    BrokerDefinition,
    ComposeStarted,
    DockerHooks,
    TargetDefinition,
)
from mqbench.brokers.docker.compose import ComposeEntry
from mqbench.brokers.services.tbmq_api import MqttCredential, bootstrap_credentials, wait_for_health
from mqbench.errors import BrokerError
from mqbench.scenario.security import secret_text

CREDENTIALS_OPTION = "tbmq_credentials"
HTTP_PORT_VAR = "MQBENCH_HTTP_PORT"
"""The compose variable of TBMQ's published REST port."""
BASIC_AUTH_VAR = "MQBENCH_TBMQ_BASIC_AUTH"


def parse_credentials(raw: Any) -> list[MqttCredential]:
    """The ``tbmq_credentials`` option as credentials; ``BrokerError`` saying what is wrong."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise BrokerError("option 'tbmq_credentials' must be a list of mappings")
    creds: list[MqttCredential] = []
    for item in raw:
        if not isinstance(item, Mapping) or not {"username", "password"} <= set(item):
            raise BrokerError(
                "each tbmq_credentials entry needs username and password "
                "(and optionally client_type: DEVICE|APPLICATION, client_id)"
            )
        client_type = str(item.get("client_type", "DEVICE")).upper()
        if client_type not in ("DEVICE", "APPLICATION"):
            raise BrokerError(f"tbmq client_type must be DEVICE or APPLICATION, not {client_type}")
        creds.append(
            MqttCredential(
                str(item["username"]),
                secret_text(item["password"]),  # given as password_env or password_file
                "APPLICATION" if client_type == "APPLICATION" else "DEVICE",
                str(item["client_id"]) if item.get("client_id") else None,
            )
        )
    return creds


class TbmqHooks(DockerHooks):
    """Basic authentication on only with credentials; health wait and REST bootstrap."""

    options = frozenset({CREDENTIALS_OPTION})

    def variables(self, options: Mapping[str, Any]) -> dict[str, str]:
        """``MQBENCH_TBMQ_BASIC_AUTH``: true when credentials are given."""
        credentials = parse_credentials(options.get(CREDENTIALS_OPTION))
        return {BASIC_AUTH_VAR: "true" if credentials else "false"}

    def after_up(self, started: ComposeStarted) -> dict[str, Any]:
        """Wait for ``/actuator/health`` to say UP, then create the credentials."""
        credentials = parse_credentials(started.options.get(CREDENTIALS_OPTION))
        base_url = f"http://{started.host}:{started.ports[HTTP_PORT_VAR]}"
        wait_for_health(base_url, started.timeout_s)
        bootstrap_credentials(base_url, credentials)
        return {
            "tbmq_credentials": [
                {"username": c.username, "client_type": c.client_type} for c in credentials
            ]
        }


DEFINITION = BrokerDefinition(
    "tbmq",
    (
        TargetDefinition(
            "tbmq",
            "TBMQ 2.x",
            "mqtt",
            "TBMQ 2.x with Kafka, Valkey and PostgreSQL, over MQTT",
            1883,
            docker_only="TBMQ is published in no package registry (only as Docker images), and "
            "needs Kafka, Valkey and PostgreSQL beside it",
            compose=ComposeEntry(
                "tbmq.yaml", "tbmq", extra_ports={HTTP_PORT_VAR: 8083}, min_startup_s=300.0
            ),
            docker_hooks=TbmqHooks(),
            docker_security_gap=(
                "mqbench does not configure TBMQ's TLS listener (its own keystore settings), and "
                "its users come from the REST API (docker option tbmq_credentials), not from "
                "security.auth"
            ),
        ),
    ),
)
"""TBMQ: Docker only, with a REST bootstrap after start."""
