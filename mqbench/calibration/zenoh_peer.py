"""Zenoh's broker-less calibration path: peer-mode sessions and a discovery peer.

A zenoh *router* is the broker, so it cannot serve as zenoh's floor. What zenoh offers
instead is peer to peer: sessions in ``peer`` mode connect to each other directly. The lean
zenoh client does this with ``ClientOptions.extra["mode"] = "peer"`` (see
``mqbench.transports.zenoh``): every session listens on an ephemeral loopback port and
connects to one *discovery peer* (:func:`open_discovery_peer`, run in the relay process);
gossip scouting tells each session where the others listen, the sessions connect to each
other, and every ``put`` goes from the publisher's session straight to the subscriber's.
A peer does not forward for others (zenoh's ``peer_to_peer`` routing): the discovery peer
carries no data, which its CPU in a calibration cell shows (it is sampled as the
"broker").

:class:`ZenohPeerTransport` is the client factory a calibration scenario names as its
``client`` (``mqbench.calibration.zenoh_peer:ZenohPeerTransport``): the lean zenoh client,
in peer mode.
"""

from __future__ import annotations

import json
from typing import Any

from mqbench.endpoint import Endpoint
from mqbench.transports.base import ClientOptions
from mqbench.transports.zenoh import CAPABILITIES, ZenohClient

CLIENT: str = "mqbench.calibration.zenoh_peer:ZenohPeerTransport"
"""The ``client`` value that selects the lean zenoh client in peer mode."""


def discovery_settings(listen: str) -> dict[str, Any]:
    """Config of the discovery peer: peer mode, one listener, gossip on, multicast off."""
    return {
        "mode": "peer",
        "listen/endpoints": [listen],
        "connect/endpoints": [],
        "scouting/multicast/enabled": False,
        "scouting/gossip/enabled": True,
        "adminspace/enabled": False,
    }


def open_discovery_peer(host: str, port: int) -> Any:
    """Open the discovery peer's session listening on ``tcp/host:port`` (raises ZError)."""
    import zenoh

    config = zenoh.Config()
    for key, value in discovery_settings(f"tcp/{host}:{port}").items():
        config.insert_json5(key, json.dumps(value))
    return zenoh.open(config)


class ZenohPeerTransport:
    """The lean zenoh client in peer mode (implements ``transports.base.Transport``)."""

    name = "zenoh"
    protocol = "zenoh"
    capabilities = CAPABILITIES

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> ZenohClient:
        """A new, unconnected peer-mode ``ZenohClient`` whose discovery peer is ``endpoint``."""
        extra = {**options.extra, "mode": "peer"}
        return ZenohClient(
            endpoint,
            ClientOptions(
                client_id=options.client_id,
                clean_session=options.clean_session,
                keepalive_s=options.keepalive_s,
                connect_timeout_s=options.connect_timeout_s,
                on_event=options.on_event,
                protocol=options.protocol,
                extra=extra,
            ),
        )
