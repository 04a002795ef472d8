"""Does the broker send a QoS 2 message again after releasing it (PUBREL), when a takeover
connection dies while the broker resends? (run on demand; docs/findings.md, "mosquitto
delivers a QoS 2 message twice after a reset storm").

MQTT 3.1.1 section 4.3.3: the sender "MUST NOT re-send the PUBLISH once it has sent the
corresponding PUBREL"; after PUBREL the receiver must take a PUBLISH with the same packet
id as a new message, so such a resend is delivered twice. Per trial, against a broker
mqbench starts natively, with a fresh client id:

1. a subscriber with a persistent session subscribes at QoS 2; one message is published;
2. the subscriber receives the PUBLISH, answers PUBREC, receives PUBREL and closes without
   PUBCOMP (the PUBCOMP a fault proxy's reset swallows);
3. ``--flaps`` connections each send a CONNECT with its client id and close at once, as a
   subscriber's reconnects through a resetting proxy do;
4. the subscriber resumes: the broker owes it PUBREL; a trial where the PUBLISH comes
   again instead is a replay.

``--flaps 0`` is the control (nothing but a plain reconnect). ``--port`` fixes the broker's
port, for a capture (``tshark -i lo -f "tcp port 21984"``).

    .venv/bin/python benchmarks/qos2_release_replay.py --target mosquitto --trials 20
    .venv/bin/python benchmarks/qos2_release_replay.py --target mosquitto --flaps 0
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _raw_mqtt import Conn

from mqbench.brokers.base import StartRequest
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.wire.mqtt.packets import (
    Connack,
    Connect,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Suback,
    Subscribe,
)


def session(port: int, cid: str) -> tuple[Conn, Connack]:
    """A connection of the persistent session ``cid`` (retried while the broker drops it)."""
    for _ in range(50):
        conn = Conn(port)
        conn.send(Connect(cid, clean_session=False))
        ack = conn.next()
        if isinstance(ack, Connack) and not ack.return_code:
            return conn, ack
        conn.close()
        time.sleep(0.05)
    raise RuntimeError(f"{cid}: no CONNACK in 50 attempts")


def publish_one(port: int, cid: str, topic: str) -> None:
    """One QoS 2 message, its flow completed."""
    pub, _ = session(port, cid + "-pub")
    pub.send(Publish(topic, b"the message", qos=2, packet_id=1))
    pub.next()
    pub.send(PubRel(1))
    pub.next()
    pub.close()


def trial(port: int, cid: str, flaps: int) -> tuple[bool, str]:
    """One trial (module docstring): whether the broker replayed the PUBLISH, and what the
    resumed session received."""
    topic = f"replay/{cid}"
    sub, _ = session(port, cid)
    sub.send(Subscribe(1, ((topic, 2),)))
    assert isinstance(sub.next(), Suback)
    publish_one(port, cid, topic)
    first = sub.next()
    assert isinstance(first, Publish), first
    sub.send(PubRec(first.packet_id))
    assert sub.next() == PubRel(first.packet_id)
    sub.close()  # no PUBCOMP
    time.sleep(0.1)
    for _ in range(flaps):
        flap = Conn(port)
        flap.send(Connect(cid, clean_session=False))
        flap.close()
        time.sleep(0.02)
    time.sleep(0.2)
    sub, ack = session(port, cid)
    seen: list[str] = [f"CONNACK(sp={int(ack.session_present)})"]
    replayed = False
    while (packet := sub.next(timeout=1.0)) is not None:
        if isinstance(packet, Publish):
            replayed |= packet.packet_id == first.packet_id
            seen.append(f"PUBLISH(mid {packet.packet_id}, dup {int(packet.dup)})")
            sub.send(PubRec(packet.packet_id))
        elif isinstance(packet, PubRel):
            seen.append(f"PUBREL(mid {packet.packet_id})")
            sub.send(PubComp(packet.packet_id))
    sub.close()
    return replayed, " ".join(seen)


def run_target(target: str, args: argparse.Namespace) -> None:
    """Start ``target`` natively, run the trials, print the replays and a summary line."""
    with tempfile.TemporaryDirectory(prefix="mqbench-replay-") as tmp:
        broker = NativeRuntime().start(
            StartRequest(target=target, workdir=Path(tmp), port=args.port, startup_timeout_s=120)
        )
        try:
            replays = 0
            for k in range(args.trials):
                replayed, seen = trial(broker.endpoint.port, f"replay-{k}", args.flaps)
                replays += replayed
                if replayed or args.verbose:
                    print(f"  {target} trial {k}: {seen}", flush=True)
            print(
                json.dumps(
                    {"target": target, "flaps": args.flaps, "trials": args.trials,
                     "replays": replays}
                ),
                flush=True,
            )  # fmt: skip
        finally:
            broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", required=True)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--flaps", type=int, default=3)
    parser.add_argument("--verbose", action="store_true", help="print every trial")
    parser.add_argument("--port", type=int, help="the broker's port (default: a free one)")
    args = parser.parse_args()
    for target in args.target:
        run_target(target, args)


if __name__ == "__main__":
    main()
