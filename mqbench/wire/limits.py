"""The largest payload each protocol carries, named as its users know it (for refusals).

A limit the broker's own settings decide (the nats server's ``max_payload``, RabbitMQ's
``max_message_size``) lives with the broker's definition (``payload_limit``); these are the
ones a client meets whatever the broker: ``mqbench/workload/preflight.py`` refuses a
payload above either before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from mqbench.wire.mqtt.primitives import MAX_REMAINING_LENGTH


@dataclass(frozen=True)
class PayloadLimit:
    """The largest message payload something accepts, and who sets it."""

    max_bytes: int
    what: str
    """E.g. ``the nats server's max_payload (broker.options.max_payload)``."""

    def refusal(self, payload_bytes: int) -> str | None:
        """One line when ``payload_bytes`` is above the limit, else None."""
        if payload_bytes <= self.max_bytes:
            return None
        return f"payload {payload_bytes:,} B is above {self.what}: {self.max_bytes:,} B"


MQTT_HEADROOM: Final = 64 * 1024
"""Kept below MQTT's remaining-length maximum for the topic and the PUBLISH header."""
MQTT: Final = PayloadLimit(
    MAX_REMAINING_LENGTH - MQTT_HEADROOM,
    "MQTT's maximum packet size (256 MiB, less 64 KiB for the topic and header)",
)
REDIS_MAX_BULK_LEN: Final = 512 << 20
"""Redis's default ``proto-max-bulk-len``: larger bulk strings are refused by the server."""
REDIS: Final = PayloadLimit(REDIS_MAX_BULK_LEN, "redis's proto-max-bulk-len (512 MiB by default)")
