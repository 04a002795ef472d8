"""A persistent MQTT session resumed right after connections that sent CONNECT and vanished:
does the broker still deliver every QoS 1/2 message? (run on demand; docs/findings.md,
experiment 3).

This is what a subscriber does while a fault proxy resets its connections: each reconnect
attempt opens a TCP connection through the proxy, its CONNECT reaches the broker, and the
proxy closes it before the CONNACK. Per trial, against a broker mqbench starts natively:

1. a subscriber with a persistent session (clean session false) subscribes to a topic at
   the trial's QoS and disconnects;
2. ``--flaps`` connections each send a CONNECT with the same client id and close at once
   (``--gap`` seconds after the last one the subscriber comes back);
3. the subscriber reconnects (retrying a connection the broker drops, as mqbench's client
   does), subscribes again unless ``--no-resubscribe`` (mqbench always does), and 20 QoS
   1/2 messages are published to the topic;
4. the messages received within 2 s of the last are counted.

A trial that receives fewer than 20 prints which arrived: ``[0, 2, 4, ...]`` means the
messages were dealt round robin to the resumed session and one more consumer that no
connection reads.

    .venv/bin/python benchmarks/session_takeover.py --target artemis --trials 10
    .venv/bin/python benchmarks/session_takeover.py --target mosquitto --target hivemq
    .venv/bin/python benchmarks/session_takeover.py --target artemis \\
        --options '{"acceptor_params": "allowLinkStealing=false"}'
"""

from __future__ import annotations

import argparse
import json
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _raw_mqtt import Conn

from mqbench.brokers.base import StartRequest
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.wire.mqtt.packets import (
    Connack,
    Connect,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Suback,
    Subscribe,
)

MESSAGES = 20
TOPIC = "takeover/t"


@dataclass
class Trial:
    """What one trial saw."""

    received: list[int]
    session_present: bool | None
    dropped: list[str] = field(default_factory=list)


def resume(port: int, cid: str, qos: int, resubscribe: bool, dropped: list[str]) -> Conn | None:
    """Connect with the persistent session, as a client that retries dropped connections."""
    for _ in range(100):
        conn = Conn(port)
        conn.send(Connect(cid, clean_session=False))
        ack = conn.next()
        if not isinstance(ack, Connack) or ack.return_code:
            dropped.append(
                "no CONNACK" if ack is None else f"CONNACK {getattr(ack, 'return_code', '?')}"
            )
            conn.close()
            time.sleep(0.05)
            continue
        if resubscribe or not ack.session_present:
            conn.send(Subscribe(1, ((TOPIC, qos),)))
            if not isinstance(conn.next(), Suback):
                dropped.append("no SUBACK")
                conn.close()
                continue
        return conn
    return None


def publish(port: int, cid: str, qos: int) -> None:
    """``MESSAGES`` messages at ``qos``, each acknowledged before the next."""
    pub = Conn(port)
    pub.send(Connect(cid + "-pub"))
    pub.next()
    for i in range(MESSAGES):
        pub.send(Publish(TOPIC, struct.pack(">I", i), qos=qos, packet_id=i + 1))
        ack = pub.next()
        if qos == 2 and isinstance(ack, PubRec):
            pub.send(PubRel(ack.packet_id))
            pub.next()
    pub.close()


def collect(conn: Conn, qos: int) -> list[int]:
    """The message numbers received until 2 s pass without one."""
    got = []
    while (packet := conn.next(timeout=2.0)) is not None:
        if isinstance(packet, Publish):
            got.append(struct.unpack(">I", packet.payload[:4])[0])
            conn.send(PubAck(packet.packet_id) if qos == 1 else PubRec(packet.packet_id))
        elif isinstance(packet, PubRel):
            conn.send(PubComp(packet.packet_id))
    return got


def trial(port: int, cid: str, qos: int, flaps: int, gap: float, resubscribe: bool) -> Trial:
    """One trial (module docstring, steps 1-4)."""
    dropped: list[str] = []
    first = resume(port, cid, qos, True, dropped)
    if first is None:
        return Trial([], None, dropped)
    first.close()
    time.sleep(0.3)
    for _ in range(flaps):
        flap = Conn(port)
        flap.send(Connect(cid, clean_session=False))
        flap.close()
        time.sleep(0.01)
    time.sleep(gap)
    conn = resume(port, cid, qos, resubscribe, dropped)
    if conn is None:
        return Trial([], None, dropped)
    publish(port, cid, qos)
    got = collect(conn, qos)
    conn.close()
    return Trial(got, True, dropped)


def run_target(target: str, args: argparse.Namespace) -> None:
    """Start ``target`` natively, run the trials, print one line per QoS."""
    runtime = NativeRuntime()
    with tempfile.TemporaryDirectory(prefix="mqbench-takeover-") as tmp:
        broker = runtime.start(
            StartRequest(
                target=target,
                workdir=Path(tmp),
                port=None,
                options=json.loads(args.options),
                startup_timeout_s=120,
            )
        )
        try:
            for qos in args.qos:
                lossy = 0
                for k in range(args.trials):
                    cid = f"takeover-{qos}-{k}"
                    t = trial(
                        broker.endpoint.port, cid, qos, args.flaps, args.gap, args.resubscribe
                    )
                    if len(set(t.received)) < MESSAGES:
                        lossy += 1
                        none = "" if t.session_present else f" (no session: {t.dropped})"
                        print(f"  {target} QoS {qos} trial {k}: got {sorted(t.received)}{none}")
                print(
                    f"{target} QoS {qos}: {lossy} of {args.trials} trials lost messages", flush=True
                )
        finally:
            broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", required=True)
    parser.add_argument("--qos", type=int, action="append", choices=(1, 2))
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--flaps", type=int, default=4)
    parser.add_argument("--gap", type=float, default=0.0)
    parser.add_argument("--no-resubscribe", dest="resubscribe", action="store_false")
    parser.add_argument("--options", default="{}", help="broker options as JSON")
    args = parser.parse_args()
    args.qos = args.qos or [1, 2]
    for target in args.target:
        run_target(target, args)


if __name__ == "__main__":
    main()
