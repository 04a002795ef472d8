"""Client TLS sockets wrapped by blocking clients (paho, aiomqtt) never outlive a failed
handshake (a loopback listener that hangs up stands in for a broker)."""

from __future__ import annotations

import socket
import ssl

import pytest

from mqbench.transports.base import ClientTls
from mqbench.transports.stream import tls_context


def test_a_socket_whose_tls_handshake_fails_is_closed_by_the_handshake() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname(), timeout=5)
        wrapped = tls_context(ClientTls()).wrap_socket(
            client, server_hostname="localhost", do_handshake_on_connect=False
        )
        try:
            peer, _ = server.accept()
            peer.close()  # hangs up instead of answering the ClientHello
            with pytest.raises(OSError):
                wrapped.do_handshake()
            assert wrapped.fileno() == -1  # closed, not left to the garbage collector
        finally:
            wrapped.close()


def test_a_non_blocking_handshake_that_must_wait_keeps_its_socket() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname(), timeout=5)
        client.setblocking(False)
        wrapped = tls_context(ClientTls()).wrap_socket(
            client, server_hostname="localhost", do_handshake_on_connect=False
        )
        try:
            peer, _ = server.accept()
            with peer, pytest.raises(ssl.SSLWantReadError):
                wrapped.do_handshake()  # the peer has not answered yet: try again later
            assert wrapped.fileno() != -1
        finally:
            wrapped.close()
