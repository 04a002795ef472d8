"""TBMQ bootstrap against a fake TBMQ REST server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from mqbench.brokers.services.tbmq_api import (
    MqttCredential,
    bootstrap_credentials,
    health_status,
    wait_for_health,
)
from mqbench.errors import BrokerError


class FakeTbmq:
    """Records requests; answers like TBMQ's health, login and credentials endpoints."""

    def __init__(self) -> None:
        self.health: list[tuple[int, Any]] = [(200, {"status": "UP"})]
        self.requests: list[dict[str, Any]] = []
        self.password = "sysadmin"

    def handle(self, method: str, path: str, headers: Any, body: Any) -> tuple[int, Any]:
        self.requests.append({"method": method, "path": path, "headers": headers, "body": body})
        if path == "/actuator/health":
            return self.health.pop(0) if len(self.health) > 1 else self.health[0]
        if path == "/api/auth/login":
            if body == {"username": "sysadmin@thingsboard.org", "password": self.password}:
                return 200, {"token": "jwt-1", "refreshToken": "r-1"}
            return 401, {"status": 401, "message": "Authentication failed", "errorCode": 10}
        if path == "/api/mqtt/client/credentials":
            if headers.get("X-Authorization") != "Bearer jwt-1":
                return 401, {"message": "Authentication failed"}
            return 200, {"id": "c0ffee", **body}
        return 404, {"message": "not found"}


@pytest.fixture
def tbmq() -> Iterator[tuple[FakeTbmq, str]]:
    fake = FakeTbmq()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            status, answer = fake.handle(method, self.path, dict(self.headers), body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_health_wait_returns_once_tbmq_reports_up(tbmq: tuple[FakeTbmq, str]) -> None:
    fake, url = tbmq
    fake.health = [(503, {"status": "DOWN"}), (503, {"status": "DOWN"}), (200, {"status": "UP"})]
    sleeps: list[float] = []
    wait_for_health(url, timeout_s=30, poll_s=0.01, sleep=sleeps.append)
    assert [r["path"] for r in fake.requests] == ["/actuator/health"] * 3
    assert len(sleeps) == 2


def test_health_wait_times_out_with_the_last_answer(tbmq: tuple[FakeTbmq, str]) -> None:
    fake, url = tbmq
    fake.health = [(401, {"message": "Authentication failed"})]
    with pytest.raises(BrokerError, match=r"did not report UP .* \(last answer: HTTP 401\)"):
        wait_for_health(url, timeout_s=0.3, poll_s=0.05)


def test_unreachable_health_endpoint_says_so() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert health_status(f"http://127.0.0.1:{port}", timeout_s=1).startswith("unreachable:")


def test_credentials_are_created_after_one_login_with_client_types(
    tbmq: tuple[FakeTbmq, str],
) -> None:
    fake, url = tbmq
    stored = bootstrap_credentials(
        url,
        [
            MqttCredential("dev", "pw1"),
            MqttCredential("app", "pw2", "APPLICATION", client_id="fanin-sub-0"),
        ],
    )
    assert [r["path"] for r in fake.requests] == [
        "/api/auth/login",
        "/api/mqtt/client/credentials",
        "/api/mqtt/client/credentials",
    ]
    device, application = (r["body"] for r in fake.requests[1:])
    assert device["clientType"] == "DEVICE" and device["credentialsType"] == "MQTT_BASIC"
    assert device["name"] == "mqbench-device-dev"
    assert json.loads(device["credentialsValue"]) == {
        "clientId": None,
        "userName": "dev",
        "password": "pw1",
        "authRules": {"pubAuthRulePatterns": [".*"], "subAuthRulePatterns": [".*"]},
    }
    assert application["clientType"] == "APPLICATION"
    assert json.loads(application["credentialsValue"])["clientId"] == "fanin-sub-0"
    assert [s["id"] for s in stored] == ["c0ffee", "c0ffee"]


def test_failed_login_is_a_broker_error_with_tbmqs_message(tbmq: tuple[FakeTbmq, str]) -> None:
    fake, url = tbmq
    fake.password = "changed"
    with pytest.raises(BrokerError, match=r"login as sysadmin@thingsboard.org failed \(HTTP 401\)"):
        bootstrap_credentials(url, [MqttCredential("dev", "pw")])


def test_no_credentials_means_no_rest_calls(tbmq: tuple[FakeTbmq, str]) -> None:
    fake, url = tbmq
    assert bootstrap_credentials(url, []) == []
    assert fake.requests == []
