"""Broker configuration and client classification (DEVICE or APPLICATION).

TBMQ distinguishes DEVICE clients (IoT devices: publish often, subscribe to little; their
persistent sessions keep undelivered QoS 1/2 messages in the device store, Redis in TBMQ)
from APPLICATION clients (back ends: always persistent, each with its own ordered queue,
a Kafka topic in TBMQ). Here a client's type comes from a credentials file when one is
given (and then the credentials are enforced), else from client-id patterns.

Credentials file (JSON)::

    {"credentials": [
        {"username": "app", "password": "secret", "client_type": "APPLICATION"},
        {"client_id": "sensor-.*", "client_type": "DEVICE"}
    ]}

An entry matches when every field it names matches (``client_id`` is a regular expression
matched in full; ``username`` and ``password`` compare exactly). The first matching entry
wins; with a credentials file a CONNECT that matches no entry is refused (not authorized).
"""

from __future__ import annotations

import hmac
import json
import re
import ssl
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Final, Literal

from mqbench.errors import UsageError

MAX_MESSAGES_LIMIT: Final = 0xFFFF
"""Largest persisted-messages limit per DEVICE client (the MQTT packet-id range)."""

PersistenceName = Literal["memory", "redis-async", "redis-sync", "postgres"]
PERSISTENCE_NAMES: Final[tuple[str, ...]] = ("memory", "redis-async", "redis-sync", "postgres")
AppQueueName = Literal["memory", "redis-streams"]
APP_QUEUE_NAMES: Final[tuple[str, ...]] = ("memory", "redis-streams")


class ClientType(Enum):
    """TBMQ's client types."""

    DEVICE = "DEVICE"
    APPLICATION = "APPLICATION"


@dataclass(frozen=True)
class Credential:
    """One entry of a credentials file."""

    client_type: ClientType
    client_id: re.Pattern[str] | None = None
    username: str | None = None
    password: str | None = None

    def matches(self, client_id: str, username: str | None, password: bytes | None) -> bool:
        """True when every field this entry names matches the CONNECT."""
        if self.client_id is not None and not self.client_id.fullmatch(client_id):
            return False
        if self.username is not None and self.username != username:
            return False
        return self.password is None or (
            password is not None and self.password.encode("utf-8") == password
        )


def load_credentials(path: Path) -> list[Credential]:
    """Read a credentials file; raises :class:`UsageError` with the reason when invalid."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read credentials file {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"credentials file {path} is not valid JSON: {exc}") from None
    entries = data.get("credentials") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise UsageError(f'credentials file {path}: expected {{"credentials": [...]}}')
    out: list[Credential] = []
    for k, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise UsageError(f"credentials file {path}: entry {k} is not an object")
        unknown = set(entry) - {"client_type", "client_id", "username", "password"}
        if unknown:
            raise UsageError(f"credentials file {path}: entry {k}: unknown keys {sorted(unknown)}")
        try:
            kind = ClientType(str(entry.get("client_type", "DEVICE")).upper())
        except ValueError:
            raise UsageError(
                f"credentials file {path}: entry {k}: client_type must be DEVICE or APPLICATION"
            ) from None
        pattern = entry.get("client_id")
        try:
            compiled = re.compile(str(pattern)) if pattern is not None else None
        except re.error as exc:
            raise UsageError(f"credentials file {path}: entry {k}: client_id: {exc}") from None
        out.append(
            Credential(
                kind,
                compiled,
                None if entry.get("username") is None else str(entry["username"]),
                None if entry.get("password") is None else str(entry["password"]),
            )
        )
    return out


def compile_pattern(pattern: str | None, option: str) -> re.Pattern[str] | None:
    """Compile a client-id pattern; :class:`UsageError` naming ``option`` when invalid."""
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"{option} {pattern!r} is not a valid regular expression: {exc}") from None


@dataclass
class BrokerConfig:
    """Everything the broker can be told; defaults are those of ``mqbench broker serve``."""

    host: str = "127.0.0.1"
    port: int = 1883
    persistence: str = "memory"
    """Device-session store: memory, redis-async, redis-sync or postgres."""
    app_queue: str = "memory"
    """APPLICATION queue: memory or redis-streams."""
    redis_url: str = "redis://127.0.0.1:6379/0"
    postgres_dsn: str = "postgresql://postgres@127.0.0.1:5432/postgres"
    device_pattern: str | None = None
    """Client ids (regex, full match) that are DEVICE clients; the others are APPLICATION.
    None: every client not matched by ``app_pattern`` is a DEVICE (TBMQ's default)."""
    app_pattern: str | None = None
    """Client ids (regex, full match) that are APPLICATION clients (checked first)."""
    credentials_file: Path | None = None
    username: str | None = None
    """With ``password_file``: the one user name every CONNECT must carry."""
    password_file: Path | None = None
    """File whose first line is the password every CONNECT must carry (with ``username``)."""
    tls_cert_file: Path | None = None
    """PEM server certificate: the listener speaks TLS (with ``tls_key_file``)."""
    tls_key_file: Path | None = None
    tls_client_ca_file: Path | None = None
    """PEM CA: clients must present a certificate it signed."""
    messages_limit: int = 10_000
    """Persisted messages kept per DEVICE client (TBMQ's default 10000; at most 65535)."""
    message_ttl_s: int = 600
    """Seconds a persisted message lives (the ``EX`` of its Redis string); 0: no TTL."""
    app_queue_limit: int = 100_000
    """Messages kept per APPLICATION client queue (oldest dropped past it)."""
    max_packet_size: int = 16 * 1024 * 1024
    """Largest packet accepted (bytes, fixed header included); larger ones close the link.

    16 MiB leaves room for the 1 MiB payloads of mq-bench's experiment 1 plus topic and
    headers (a 1 MiB limit would drop exactly those)."""
    receive_maximum: int = 65_535
    """QoS 1/2 PUBLISHes a client may have unacknowledged towards the broker (MQTT 5)."""
    max_inflight: int = 1000
    """Per-client window of unacknowledged QoS 1/2 messages the broker sends (the client's
    MQTT 5 receive maximum lowers it)."""
    max_keepalive_s: int = 0
    """Upper bound for client keep-alives (MQTT 5 server keep alive); 0: none."""
    default_session_expiry_s: int = 0
    """Session expiry of MQTT 3.1.1 persistent sessions; 0: never expire."""
    max_session_expiry_s: int = 0
    """Upper bound for MQTT 5 session expiry intervals; 0: none."""
    uvloop: bool = True
    """Use uvloop when it is installed."""
    extra: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        """Raise :class:`UsageError` for impossible settings (one line each)."""
        if self.persistence not in PERSISTENCE_NAMES:
            raise UsageError(
                f"unknown persistence {self.persistence!r} "
                f"(choose from: {', '.join(PERSISTENCE_NAMES)})"
            )
        if self.app_queue not in APP_QUEUE_NAMES:
            raise UsageError(
                f"unknown app queue {self.app_queue!r} (choose from: {', '.join(APP_QUEUE_NAMES)})"
            )
        if not 0 < self.messages_limit <= MAX_MESSAGES_LIMIT:
            raise UsageError(
                f"persisted messages limit must be 1..{MAX_MESSAGES_LIMIT}, "
                f"got {self.messages_limit} (it can't be greater than 65535)"
            )
        if self.message_ttl_s < 0:
            raise UsageError(f"message TTL must be >= 0 s, got {self.message_ttl_s}")
        if not 0 <= self.port <= 65535:
            raise UsageError(f"port must be 0..65535, got {self.port}")
        if self.max_packet_size < 64:
            raise UsageError(f"max packet size must be >= 64 bytes, got {self.max_packet_size}")
        if not 0 < self.receive_maximum <= 65535:
            raise UsageError(f"receive maximum must be 1..65535, got {self.receive_maximum}")
        if not 0 < self.max_inflight <= 65535:
            raise UsageError(f"max inflight must be 1..65535, got {self.max_inflight}")
        if self.app_queue_limit <= 0:
            raise UsageError(f"app queue limit must be > 0, got {self.app_queue_limit}")
        compile_pattern(self.device_pattern, "--device-pattern")
        compile_pattern(self.app_pattern, "--app-pattern")
        if (self.username is None) != (self.password_file is None):
            raise UsageError("--username and --password-file go together")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise UsageError("--tls-cert and --tls-key go together")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise UsageError("--tls-client-ca needs --tls-cert and --tls-key")

    def login(self) -> tuple[str, bytes] | None:
        """The required (user name, password), read from ``password_file``; None: any."""
        if self.username is None or self.password_file is None:
            return None
        try:
            lines = self.password_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise UsageError(f"cannot read password file {self.password_file}: {why}") from None
        if not lines or not lines[0]:
            raise UsageError(f"password file {self.password_file}: the first line is empty")
        return self.username, lines[0].encode("utf-8")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The listener's TLS context (None: plain TCP); UsageError naming a bad file."""
        if self.tls_cert_file is None or self.tls_key_file is None:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(str(self.tls_cert_file), str(self.tls_key_file))
            if self.tls_client_ca_file is not None:
                context.load_verify_locations(cafile=str(self.tls_client_ca_file))
                context.verify_mode = ssl.CERT_REQUIRED
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"cannot load the TLS certificate or key: {exc}") from None
        return context


class ClientClassifier:
    """Decides a client's type (and, with a credentials file, whether it may connect)."""

    def __init__(
        self,
        device_pattern: str | None = None,
        app_pattern: str | None = None,
        credentials: list[Credential] | None = None,
        login: tuple[str, bytes] | None = None,
    ) -> None:
        """Patterns are regular expressions matched in full against client ids; ``login``
        (user name, password) is required of every client when given."""
        self._login = login
        self._device = compile_pattern(device_pattern, "--device-pattern")
        self._app = compile_pattern(app_pattern, "--app-pattern")
        self._credentials = credentials

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ClientClassifier:
        """Build from a config (reads the credentials file)."""
        creds = load_credentials(config.credentials_file) if config.credentials_file else None
        return cls(config.device_pattern, config.app_pattern, creds, config.login())

    def classify(
        self, client_id: str, username: str | None, password: bytes | None
    ) -> ClientType | None:
        """The client's type, or None when the login or the credentials file refuses it."""
        if self._login is not None and not (
            username == self._login[0]
            and password is not None
            and hmac.compare_digest(password, self._login[1])
        ):
            return None
        if self._credentials is not None:
            for entry in self._credentials:
                if entry.matches(client_id, username, password):
                    return entry.client_type
            return None
        if self._app is not None and self._app.fullmatch(client_id):
            return ClientType.APPLICATION
        if self._device is not None and not self._device.fullmatch(client_id):
            return ClientType.APPLICATION
        return ClientType.DEVICE
