"""Protocol-level readiness probes: is a broker up *and* speaking its protocol?

A native spec's ``check_ready`` calls one of these (an open TCP port is not enough: JVM and
Erlang brokers accept connections before their protocol handlers are loaded). Each probe is
bounded by ``timeout_s``, never raises, and closes its socket. The few bytes each sends are
built here so that ``mqbench/brokers`` depends on no protocol client (docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import struct
import time
from pathlib import Path

from mqbench.brokers.runtime.net import recv_exactly, recv_line, tcp_connect

MQTT_DISCONNECT = b"\xe0\x00"
AMQP_PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


def mqtt_connect_packet(client_id: str, keepalive_s: int = 60) -> bytes:
    """An MQTT 3.1.1 CONNECT packet with clean session and no credentials."""
    cid = client_id.encode("utf-8")
    variable = b"\x00\x04MQTT\x04\x02" + keepalive_s.to_bytes(2, "big")
    payload = len(cid).to_bytes(2, "big") + cid
    remaining = len(variable) + len(payload)
    if remaining > 127:
        raise ValueError("client id too long for the readiness probe")
    return bytes([0x10, remaining]) + variable + payload


def probe_tls_context(
    ca_file: Path, cert_file: Path | None = None, key_file: Path | None = None
) -> ssl.SSLContext:
    """A client context that verifies the broker with ``ca_file`` (plus a client cert)."""
    context = ssl.create_default_context(cafile=str(ca_file))
    if cert_file is not None and key_file is not None:
        context.load_cert_chain(str(cert_file), str(key_file))
    return context


def _open(
    host: str, port: int, timeout_s: float, tls: ssl.SSLContext | None
) -> socket.socket | None:
    """A TCP (or, with ``tls``, TLS) connection within ``timeout_s``; None on failure."""
    sock = tcp_connect(host, port, timeout_s)
    if sock is None or tls is None:
        return sock
    return _upgrade(sock, host, tls)


def _upgrade(sock: socket.socket, host: str, tls: ssl.SSLContext) -> socket.socket | None:
    try:
        return tls.wrap_socket(sock, server_hostname=host)
    except OSError:  # ssl.SSLError included: not ready, or a TLS problem
        _close(sock, shutdown=False)
        return None


def _close(sock: socket.socket, shutdown: bool = True) -> None:
    if shutdown:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


def mqtt_probe(host: str, port: int, timeout_s: float, tls: ssl.SSLContext | None = None) -> bool:
    """Send an MQTT 3.1.1 CONNECT and expect a CONNACK (``20 02 ..``), any return code.

    A CONNACK that refuses the probe (e.g. "not authorized" when a config disables
    anonymous access) still proves the broker is up and speaking MQTT.
    """
    deadline = time.monotonic() + timeout_s
    sock = _open(host, port, timeout_s, tls)
    if sock is None:
        return False
    try:
        sock.sendall(mqtt_connect_packet(f"mqbench-ready-{os.getpid()}"))
        connack = recv_exactly(sock, 4, deadline)
        if connack[:2] != b"\x20\x02":
            return False
        if connack[3] == 0:
            sock.sendall(MQTT_DISCONNECT)
        return True
    except OSError:
        return False
    finally:
        _close(sock)


def amqp_probe(host: str, port: int, timeout_s: float, tls: ssl.SSLContext | None = None) -> bool:
    """Send the AMQP 0-9-1 protocol header and expect ``Connection.Start`` on channel 0."""
    deadline = time.monotonic() + timeout_s
    sock = _open(host, port, timeout_s, tls)
    if sock is None:
        return False
    try:
        sock.sendall(AMQP_PROTOCOL_HEADER)
        head = recv_exactly(sock, 11, deadline)
        frame_type, channel, _size, class_id, method_id = struct.unpack(">BHIHH", head)
        return (frame_type, channel, class_id, method_id) == (1, 0, 10, 10)
    except OSError:
        return False
    finally:
        _close(sock, shutdown=False)


def nats_probe(host: str, port: int, timeout_s: float, tls: ssl.SSLContext | None = None) -> bool:
    """Read the server's ``INFO`` line, then ``CONNECT`` + ``PING`` and expect ``PONG``.

    With ``tls`` the connection is upgraded after the plain ``INFO`` (as NATS clients do
    when the server says ``tls_required``).

    ``-ERR 'Authorization Violation'`` (a config that requires credentials) also counts
    as ready: the server answered the protocol.
    """
    deadline = time.monotonic() + timeout_s
    sock = tcp_connect(host, port, timeout_s)
    if sock is None:
        return False
    try:
        info = recv_line(sock, deadline)
        if not info.startswith(b"INFO "):
            return False
        json.loads(info[5:])
        if tls is not None:
            upgraded = _upgrade(sock, host, tls)
            if upgraded is None:
                return False
            sock = upgraded
        sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"name":"mqbench-ready"}\r\n')
        sock.sendall(b"PING\r\n")
        reply = recv_line(sock, deadline)
        return reply == b"PONG\r\n" or reply.startswith(b"-ERR 'Authorization Violation'")
    except (OSError, ValueError):
        return False
    finally:
        _close(sock)


def redis_probe(host: str, port: int, timeout_s: float, tls: ssl.SSLContext | None = None) -> bool:
    """Send ``PING`` and expect ``+PONG``.

    ``-NOAUTH`` (a password is configured) also counts: the server answered RESP.
    ``-LOADING`` does not.
    """
    deadline = time.monotonic() + timeout_s
    sock = _open(host, port, timeout_s, tls)
    if sock is None:
        return False
    try:
        sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        reply = recv_line(sock, deadline)
        return reply == b"+PONG\r\n" or reply.startswith(b"-NOAUTH")
    except OSError:
        return False
    finally:
        _close(sock)
