"""TBMQ bootstrap over its REST API: wait for ``/actuator/health``, create MQTT credentials.

TBMQ decides a client's type (DEVICE or APPLICATION) from the MQTT credentials it
authenticates with. mqbench makes clients usable without manual steps in one of two ways:

- default: the compose file sets ``SECURITY_MQTT_BASIC_ENABLED=false``; with no
  authentication provider enabled every client connects without credentials and is a
  DEVICE client (what the P2P experiments use);
- when a scenario needs APPLICATION clients (fan-in subscribers) or named DEVICE
  credentials, the runtime enables the basic provider and creates ``MQTT_BASIC``
  credentials here: log in as the system administrator (``POST /api/auth/login``) and
  ``POST /api/mqtt/client/credentials`` with the client type, user name, password and
  allow-all publish/subscribe rules.

Only the standard library is used (``urllib``); every call has a timeout.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Literal

from mqbench.errors import BrokerError

ClientType = Literal["DEVICE", "APPLICATION"]

DEFAULT_ADMIN_USER = "sysadmin@thingsboard.org"
"""TBMQ's default system administrator (created by the first-start install)."""
DEFAULT_ADMIN_PASSWORD = "sysadmin"
"""Its default password."""
HTTP_TIMEOUT_S = 10.0
"""Timeout of one REST call."""


@dataclass(frozen=True)
class MqttCredential:
    """MQTT basic credentials to create: clients log in with ``username``/``password``."""

    username: str
    password: str
    client_type: ClientType = "DEVICE"
    client_id: str | None = None
    """None: any client id may use these credentials."""

    @property
    def name(self) -> str:
        """The credentials' display name in TBMQ."""
        return f"mqbench-{self.client_type.lower()}-{self.username}"


def _request(
    method: str,
    url: str,
    body: dict[str, Any] | None = None,
    token: str | None = None,
    timeout_s: float = HTTP_TIMEOUT_S,
) -> tuple[int, Any]:
    """One HTTP call; returns (status, parsed JSON or text). Raises ``OSError`` when unreachable."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token is not None:
        req.add_header("X-Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text


def health_status(base_url: str, timeout_s: float = HTTP_TIMEOUT_S) -> str:
    """What ``/actuator/health`` says: ``UP``, ``DOWN``, ``HTTP <code>`` or ``unreachable: ...``."""
    try:
        status, body = _request("GET", f"{base_url}/actuator/health", timeout_s=timeout_s)
    except OSError as exc:
        return f"unreachable: {exc}"
    if isinstance(body, dict) and isinstance(body.get("status"), str):
        return str(body["status"])
    return f"HTTP {status}"


def wait_for_health(
    base_url: str, timeout_s: float, poll_s: float = 1.0, sleep: Any = time.sleep
) -> None:
    """Return once ``/actuator/health`` says UP; ``BrokerError`` with the last answer otherwise."""
    deadline = time.monotonic() + timeout_s
    last = "not asked yet"
    while True:
        remaining = deadline - time.monotonic()
        last = health_status(base_url, timeout_s=max(min(remaining, HTTP_TIMEOUT_S), 0.1))
        if last == "UP":
            return
        if time.monotonic() + poll_s > deadline:
            raise BrokerError(
                f"TBMQ at {base_url} did not report UP on /actuator/health within "
                f"{timeout_s:g} s (last answer: {last})"
            )
        sleep(poll_s)


def login(
    base_url: str, username: str = DEFAULT_ADMIN_USER, password: str = DEFAULT_ADMIN_PASSWORD
) -> str:
    """Log in to TBMQ's REST API; returns the JWT for ``X-Authorization: Bearer``."""
    try:
        status, body = _request(
            "POST", f"{base_url}/api/auth/login", {"username": username, "password": password}
        )
    except OSError as exc:
        raise BrokerError(f"TBMQ REST API at {base_url} unreachable: {exc}") from exc
    if status != 200 or not isinstance(body, dict) or not body.get("token"):
        raise BrokerError(f"TBMQ login as {username} failed (HTTP {status}): {_brief(body)}")
    return str(body["token"])


def create_mqtt_credentials(base_url: str, token: str, cred: MqttCredential) -> dict[str, Any]:
    """Create one ``MQTT_BASIC`` credential with allow-all rules; returns TBMQ's answer."""
    value = {
        "clientId": cred.client_id,
        "userName": cred.username,
        "password": cred.password,
        "authRules": {"pubAuthRulePatterns": [".*"], "subAuthRulePatterns": [".*"]},
    }
    payload = {
        "name": cred.name,
        "clientType": cred.client_type,
        "credentialsType": "MQTT_BASIC",
        "credentialsValue": json.dumps(value),
    }
    try:
        status, body = _request("POST", f"{base_url}/api/mqtt/client/credentials", payload, token)
    except OSError as exc:
        raise BrokerError(f"TBMQ REST API at {base_url} unreachable: {exc}") from exc
    if status != 200 or not isinstance(body, dict):
        raise BrokerError(
            f"TBMQ refused MQTT credentials {cred.name!r} (HTTP {status}): {_brief(body)}"
        )
    return body


def bootstrap_credentials(
    base_url: str,
    credentials: list[MqttCredential],
    admin_user: str = DEFAULT_ADMIN_USER,
    admin_password: str = DEFAULT_ADMIN_PASSWORD,
) -> list[dict[str, Any]]:
    """Log in once and create every credential; returns what TBMQ stored for each."""
    if not credentials:
        return []
    token = login(base_url, admin_user, admin_password)
    return [create_mqtt_credentials(base_url, token, cred) for cred in credentials]


def _brief(body: Any) -> str:
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    text = body if isinstance(body, str) else json.dumps(body)
    return text[:200] if text else "(empty body)"
