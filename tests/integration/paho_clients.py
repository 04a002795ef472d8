"""Stopping a test's paho-mqtt client so that it holds no socket afterwards."""

from __future__ import annotations

import paho.mqtt.client as paho


def stop_paho(client: paho.Client) -> None:
    """Disconnect, stop paho's network thread and close every socket the client holds.

    ``loop_start()`` opens a loopback TCP socket pair to wake paho's thread, and paho closes
    it only in ``Client.__del__``. A test client sits in a reference cycle (its callbacks
    refer to the object that holds it), so the pair was left to the garbage collector, which
    may finalise the sockets before the client and turn them into ResourceWarnings: the CI of
    2a920a3 failed on one such pair in test_broker_mqtt5_interop. ``reinitialise()`` is
    paho's public way to close them now; the client is not used again.
    """
    client.disconnect()
    client.loop_stop()
    client.reinitialise()
