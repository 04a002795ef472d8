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
connection reads. ``--interleave`` alternates the QoS levels trial by trial (QoS 1, QoS 2,
QoS 1, ...) so that both meet the same broker state (JIT, leftovers of earlier trials);
without it all QoS 1 trials run first. ``--brokers N`` repeats the whole run on N fresh
brokers, the QoS order rotating from one broker to the next (so each level is the first
thing a fresh, JIT-cold broker sees equally often), and also counts the losses of those
first trials.

``--inspect`` (Artemis only) shows what the broker holds once the session is back and
before anything is published: it starts Artemis with JMX management on and the MQTT
package's debug log, and per trial lists the consumers on the trial's subscription queue
as Artemis's management view gives them (``benchmarks/ArtemisInspect.java``: remote
address -> which of the trial's connections, status ``OK``/``Orphaned``, creation time
against that connection's close), counts the broker's live ``ServerConsumerImpl``,
``ServerSessionImpl``, ``MQTTSession`` and ``MQTTConnection`` objects (``jcmd <pid>
GC.class_histogram``, cumulative over the run), and prints the broker's link-stealing log
lines for the trial's client id. It needs a JDK (``javac``, ``jcmd``) and adds ~2-5 s per
trial; the timing it perturbs is the race itself, so count losses without it.

    .venv/bin/python benchmarks/session_takeover.py --target artemis --trials 10
    .venv/bin/python benchmarks/session_takeover.py --target artemis --trials 40 --interleave
    .venv/bin/python benchmarks/session_takeover.py --target artemis --brokers 10 --trials 2
    .venv/bin/python benchmarks/session_takeover.py --target artemis --qos 1 --trials 20 --inspect
    .venv/bin/python benchmarks/session_takeover.py --target mosquitto --target hivemq
    .venv/bin/python benchmarks/session_takeover.py --target artemis \\
        --options '{"acceptor_params": "allowLinkStealing=false"}'
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _artemis_inspect import (
    INSPECT_JVM_OPTIONS,
    Inspection,
    Inspector,
    jmx_on,
    link_stealing,
    port_of,
)
from _raw_mqtt import Conn

from mqbench.brokers.base import RunningBroker, StartRequest
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
SETTLE_S = 0.3
"""Before an inspection: time for the broker to finish CONNECTs still queued."""


@dataclass
class Trial:
    """What one trial saw."""

    received: list[int]
    session_present: bool | None
    dropped: list[str] = field(default_factory=list)
    roles: dict[int, str] = field(default_factory=dict)
    """Each of the trial's connections by its local port: ``first``, ``flap 1``..., ``resume``."""
    closed_at: dict[int, float] = field(default_factory=dict)
    """When the trial closed each connection (epoch seconds), by local port."""
    inspection: Inspection | None = None


def resume(port: int, cid: str, qos: int, resubscribe: bool, t: Trial, role: str) -> Conn | None:
    """Connect with the persistent session, as a client that retries dropped connections."""
    for attempt in range(100):
        conn = Conn(port)
        local = conn.sock.getsockname()[1]
        t.roles[local] = role if attempt == 0 else f"{role} retry {attempt}"
        conn.send(Connect(cid, clean_session=False))
        ack = conn.next()
        if not isinstance(ack, Connack) or ack.return_code:
            t.dropped.append(
                "no CONNACK" if ack is None else f"CONNACK {getattr(ack, 'return_code', '?')}"
            )
            close(conn, t)
            time.sleep(0.05)
            continue
        if resubscribe or not ack.session_present:
            conn.send(Subscribe(1, ((TOPIC, qos),)))
            if not isinstance(conn.next(), Suback):
                t.dropped.append("no SUBACK")
                close(conn, t)
                continue
        return conn
    return None


def close(conn: Conn, t: Trial) -> None:
    """Close ``conn`` and note when."""
    local = conn.sock.getsockname()[1]
    conn.close()
    t.closed_at[local] = time.time()


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


def flap(port: int, cid: str, flaps: int, t: Trial) -> None:
    """``flaps`` connections that each send a CONNECT with ``cid`` and close at once."""
    for k in range(flaps):
        conn = Conn(port)
        t.roles[conn.sock.getsockname()[1]] = f"flap {k + 1}"
        conn.send(Connect(cid, clean_session=False))
        close(conn, t)
        time.sleep(0.01)


def trial(
    port: int, cid: str, qos: int, args: argparse.Namespace, inspector: Inspector | None
) -> Trial:
    """One trial (module docstring, steps 1-4); with ``inspector``, a look in between."""
    t = Trial([], None)
    first = resume(port, cid, qos, True, t, "first")
    if first is None:
        return t
    close(first, t)
    time.sleep(0.3)
    flap(port, cid, args.flaps, t)
    time.sleep(args.gap)
    conn = resume(port, cid, qos, args.resubscribe, t, "resume")
    if conn is None:
        return t
    if inspector is not None:
        time.sleep(SETTLE_S)
        t.inspection = inspector.snapshot(queue_of(cid))
    publish(port, cid, qos)
    t.received = collect(conn, qos)
    t.session_present = True
    conn.close()
    return t


def queue_of(cid: str) -> str:
    """Artemis's subscription queue of ``cid`` for ``TOPIC`` (client id + '.' + address)."""
    return f"{cid}.{TOPIC.replace('/', '.')}"


@contextmanager
def started(target: str, args: argparse.Namespace) -> Iterator[tuple[RunningBroker, Path]]:
    """``target`` started natively in a temporary directory (also returned: the broker's log
    is ``<dir>/<target>.log``); stopped, by PID, on exit.

    With ``--inspect``: JMX management on in ``broker.xml`` (``jmx_on``) and the MQTT debug
    log (``INSPECT_JVM_OPTIONS`` through ``JAVA_TOOL_OPTIONS``, set for the start only)."""
    saved = os.environ.get("JAVA_TOOL_OPTIONS")
    with tempfile.TemporaryDirectory(prefix="mqbench-takeover-") as tmp:
        if args.inspect:
            os.environ["JAVA_TOOL_OPTIONS"] = INSPECT_JVM_OPTIONS
        try:
            with jmx_on() if args.inspect else nullcontext():
                broker = NativeRuntime().start(
                    StartRequest(
                        target=target,
                        workdir=Path(tmp),
                        port=None,
                        options=json.loads(args.options),
                        startup_timeout_s=120,
                    )
                )
        finally:
            if saved is None:
                os.environ.pop("JAVA_TOOL_OPTIONS", None)
            else:
                os.environ["JAVA_TOOL_OPTIONS"] = saved
        try:
            yield broker, Path(tmp)
        finally:
            broker.stop()


def schedule(args: argparse.Namespace, order: list[int]) -> list[tuple[int, int]]:
    """(QoS, trial number) in the order they run on one broker."""
    if args.interleave:
        return [(qos, k) for k in range(args.trials) for qos in order]
    return [(qos, k) for qos in order for k in range(args.trials)]


@dataclass
class Tally:
    """Counts over every broker a target ran on."""

    lossy: dict[int, int] = field(default_factory=dict)
    trials: dict[int, int] = field(default_factory=dict)
    first: dict[int, list[int]] = field(default_factory=dict)
    """Per QoS: [trials that were a fresh broker's first, of which lossy]."""
    inspected: dict[tuple[int, bool], int] = field(default_factory=dict)


def run_broker(target: str, args: argparse.Namespace, order: list[int], tally: Tally) -> None:
    """Start ``target`` natively and run one broker's trials, QoS levels in ``order``."""
    with started(target, args) as (broker, workdir), tempfile.TemporaryDirectory() as scratch:
        inspector = Inspector(broker.pids[0], Path(scratch)) if args.inspect else None
        for n, (qos, k) in enumerate(schedule(args, order)):
            cid = f"takeover-{qos}-{k}"
            t = trial(broker.endpoint.port, cid, qos, args, inspector)
            lost = len(set(t.received)) < MESSAGES
            tally.lossy[qos] = tally.lossy.get(qos, 0) + lost
            tally.trials[qos] = tally.trials.get(qos, 0) + 1
            if n == 0:
                first = tally.first.setdefault(qos, [0, 0])
                first[0] += 1
                first[1] += lost
            if lost:
                none = "" if t.session_present else f" (no session: {t.dropped})"
                print(f"  {target} QoS {qos} trial {k}: got {sorted(t.received)}{none}")
            if t.inspection is not None:
                held = len(t.inspection.consumers)
                tally.inspected[held, lost] = tally.inspected.get((held, lost), 0) + 1
                show_inspection(t, t.inspection, cid, lost, workdir / f"{target}.log")


def run_target(target: str, args: argparse.Namespace) -> None:
    """Run the trials on ``--brokers`` fresh brokers (the QoS order rotating from one to the
    next), print one line per QoS."""
    tally = Tally()
    for b in range(args.brokers):
        shift = b % len(args.qos)
        run_broker(target, args, args.qos[shift:] + args.qos[:shift], tally)
    for qos in args.qos:
        line = f"{target} QoS {qos}: {tally.lossy[qos]} of {tally.trials[qos]} trials lost messages"
        if args.brokers > 1:
            runs, lost = tally.first.get(qos, [0, 0])
            line += f" ({lost} of the {runs} that ran first on a fresh broker)"
        print(line, flush=True)
    for (held, lost), n in sorted(tally.inspected.items()):
        verdict = "lost messages" if lost else "lost nothing"
        print(f"{target} inspected: {n} trial(s) with {held} consumer(s) {verdict}")


def show_inspection(t: Trial, seen: Inspection, cid: str, lost: bool, log: Path) -> None:
    """Print what the broker held after the resume: each consumer on the trial's queue,
    the live-object counts, and (for a trial with another consumer, or a loss) the
    link-stealing lines of the broker's log."""
    held = len(seen.consumers)
    print(f"    {cid}: {held} consumer(s) on {queue_of(cid)} before publishing")
    for row in seen.consumers:
        print(f"      {describe(row, t, seen.connections)}")
    live = ", ".join(f"{name} {n}" for name, n in seen.live.items())
    print(f"      live in the broker: {live}")
    for error in seen.errors:
        print(f"      inspection error: {error}")
    if held > 1 or lost:
        closes = [f"{role(t, port)} {clock(when)}" for port, when in t.closed_at.items()]
        print(f"      closed by the client: {', '.join(closes)}")
        for what, earlier, new in link_stealing(log, cid):
            print(f"      log {what} {role(t, earlier)} for {role(t, new)}")


def describe(row: dict[str, Any], t: Trial, held: set[str]) -> str:
    """One consumer: whose connection, its status, whether the broker still holds that
    connection, when it was created (Artemis gives seconds)."""
    address = row.get("remoteAddress")
    port = port_of(address)
    text = f"consumer {row.get('id')} of {role(t, port)} ({address}), status {row.get('status')}"
    text += ", connection held" if str(address) in held else ", connection not held"
    text += f", created {row.get('creationTime')}"
    return text


def clock(epoch_s: float) -> str:
    """``HH:MM:SS.mmm`` UTC, as the broker's log writes its times."""
    stamp = time.strftime("%H:%M:%S", time.gmtime(epoch_s))
    return f"{stamp}.{int(epoch_s * 1000) % 1000:03d}"


def role(t: Trial, port: int | None) -> str:
    """Which of the trial's connections had local port ``port``."""
    return t.roles.get(port, f"port {port}") if port is not None else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", required=True)
    parser.add_argument("--qos", type=int, action="append", choices=(1, 2))
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--flaps", type=int, default=4)
    parser.add_argument("--gap", type=float, default=0.0)
    parser.add_argument("--no-resubscribe", dest="resubscribe", action="store_false")
    parser.add_argument("--interleave", action="store_true", help="alternate QoS per trial")
    parser.add_argument(
        "--brokers", type=int, default=1, help="fresh brokers, each running --trials per QoS"
    )
    parser.add_argument(
        "--inspect", action="store_true", help="Artemis: list its consumers after the resume"
    )
    parser.add_argument("--options", default="{}", help="broker options as JSON")
    args = parser.parse_args()
    args.qos = args.qos or [1, 2]
    if args.inspect and set(args.target) != {"artemis"}:
        parser.error("--inspect looks into Artemis only: use it with --target artemis")
    if not 1 <= args.trials <= 200 or not 0 <= args.flaps <= 50 or not 1 <= args.brokers <= 50:
        parser.error("--trials must be 1-200, --flaps 0-50 and --brokers 1-50")
    for target in args.target:
        run_target(target, args)


if __name__ == "__main__":
    main()
