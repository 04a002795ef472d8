"""A blocking MQTT 3.1.1 connection for benchmarks that script a broker packet by packet
(``session_takeover.py``, ``qos2_release_replay.py``)."""

from __future__ import annotations

import socket
from typing import Any

from mqbench.wire.mqtt.packets import Packet
from mqbench.wire.mqtt.parser import StreamParser


class Conn:
    """One blocking MQTT 3.1.1 connection to the broker on 127.0.0.1."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.parser = StreamParser()
        self.pending: list[Packet] = []

    def send(self, packet: Any) -> None:
        self.sock.sendall(packet.encode())

    def next(self, timeout: float = 5.0) -> Packet | None:
        """The next packet; None when the broker closed the connection or ``timeout`` ran."""
        self.sock.settimeout(timeout)
        while not self.pending:
            try:
                data = self.sock.recv(65536)
            except (TimeoutError, ConnectionError):
                return None
            if not data:
                return None
            self.pending += self.parser.feed(data)
        return self.pending.pop(0)

    def close(self) -> None:
        self.sock.close()
