"""Send stamp to wire, per engine: how long a published message waits in the generator
before its bytes leave on the loopback interface (run on demand; issue 22, docs/findings.md,
experiment 1: the Python engine's send path).

Each cell is one ``mqbench run`` (in a subprocess, ``sys.executable -m mqbench``, so the
checkout whose interpreter runs this file is the one measured) of mosquitto started by
mqbench itself (runtime native, on a port chosen here so the capture can filter on it),
topology pairs, QoS 0, with ``generator.hot_path`` set to the engine of the cell. While it
runs, ``tshark -i lo`` captures the publishers' direction only (client -> broker: ``tcp dst
port <broker port>``, data segments plus SYN/FIN, IPv4) to a pipe read here. Each client
connection's byte stream is rebuilt from the TCP sequence numbers, split into MQTT frames,
and every PUBLISH's payload gives its 24-byte mqbench header (docs/records.md: ``pub``,
``seq``, ``t_sent``). The wire time of a message is the capture time of the segment that
carries the FIRST byte of its frame (the moment it starts to leave; a frame split over
segments, or several frames in one segment, are handled). ``wire - t_sent`` is taken for
every message whose ``t_sent`` lies in the cell's measured window (``manifest.json``
``window``), one per ``(pub, seq)`` (a retransmission is not a second one).

Per cell it prints: engine (as the manifest says it ran: ``cells[].hot_path.engine``),
payload, pairs x rate, the messages matched on the wire against those sent in the window,
send stamp -> wire p50/p99 (µs), and from mqbench's own summary (the numpy reference
analysis, ``mqbench.analysis.numpy_ref``, whose summaries equal ``mqbench analyze``'s Spark
ones field by field (tests/integration/test_analysis_spark.py), without Spark's start-up):
headline latency p50/p99 (ms, from the intended time), send lag p99 (µs), generator CPU
(cores, mean over the window) and the load average (1 min) after the cell; marks after the
row: an invalid cell, a latency verdict other than ok, desyncs, negative wire times,
tshark's dropped packets, and ``!`` on an engine other than the one asked for. Engines
alternate within each payload and rate (python, compiled, python, ...), and the last lines
give python / compiled of the wire p50 (median over repeats) per payload and rate.
``--json`` prints the rows as one JSON document on stdout (the table goes to stderr).

Clock: ``t_sent`` is ``time.time_ns()`` (CLOCK_REALTIME); the capture stamps are the
kernel's (pcapng, nanosecond resolution). Before the cells a probe (``--no-clock-check``
skips it) sends 20 segments on loopback, each between two ``time.time_ns()`` reads, and
counts the capture stamps that fall between their two reads: all of them on this machine
(kernel 6.18, tshark 4.0.17), so the two are the same clock, not just the same epoch. The
same probe gives the stamp -> wire time of a bare ``socket.sendall`` from Python (the
kernel's loopback send path plus one call; 70-150 µs here under load): a floor the Python
engine cannot go below, whatever it queues. tshark prints "Capturing on" ~0.1 s before it
captures; the capture counts as started at "Capture started".

Caveats: tshark and dumpcap take CPU while they run (more at 16 KiB and 1,000 msg/s:
~16 MB/s through the pipe); the numbers are for comparing engines side by side, not
absolute. A segment cut short by ``--snaplen`` loses the frames whose start is in the cut
part (counted as ``desync``); the default captures whole segments. Without ``tshark`` on
the PATH (it is not installed by the project's scripts) the cells still run and the wire
columns are ``-``.

    # two checkouts side by side, each run by its own interpreter (this file from either):
    cd OTHER_CHECKOUT && .venv/bin/python THIS_CHECKOUT/benchmarks/send_path.py
    .venv/bin/python benchmarks/send_path.py --duration 20 --repeats 2
    .venv/bin/python benchmarks/send_path.py --engines python,compiled --sizes 1KiB \\
        --rates 10x10,20x50 --warmup 3 --duration 5 --repeats 1 --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

HEADER = struct.Struct("<IIqq")
"""The mqbench wire header (docs/records.md): pub, seq, t_sent, spare."""
SAME_HOUR_NS = 3600 * 10**9
"""A header whose t_sent is further than this from its capture time is not one."""
PUBLISH = 3
SYN, FIN, RST = 0x02, 0x01, 0x04
TSHARK_START_S = 20.0
"""How long tshark may take to start capturing."""
STOP_WAIT_S = 10.0
CAPTURE_SETTLE_S = 2.0
"""tshark says "Capturing on" before dumpcap captures (packets of the next ~0.1 s are
missed); it says "Capture started" when it does. Without the latter, wait this long."""


# --- pcapng, read as a stream --------------------------------------------------------------


@dataclass
class Packet:
    """One captured packet: interface link type, capture time (ns), the bytes captured."""

    linktype: int
    t_ns: int
    data: bytes


@dataclass
class PcapngReader:
    """Blocks of a pcapng stream fed in arbitrary chunks (a pipe from tshark)."""

    buf: bytearray = field(default_factory=bytearray)
    endian: str = "<"
    interfaces: list[tuple[int, int]] = field(default_factory=list)  # (linktype, ns per tick)

    def feed(self, chunk: bytes) -> Iterator[Packet]:
        """The packets completed by ``chunk``."""
        self.buf += chunk
        off = 0
        while len(self.buf) - off >= 12:
            btype, blen = struct.unpack_from(self.endian + "II", self.buf, off)
            if btype == 0x0A0D0D0A:  # section header: its byte order magic decides
                self.endian = "<" if self.buf[off + 8 : off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
                blen = struct.unpack_from(self.endian + "I", self.buf, off + 4)[0]
            if len(self.buf) - off < blen:
                break
            body = bytes(self.buf[off + 8 : off + blen - 4])
            off += blen
            if btype == 0x0A0D0D0A:
                self.interfaces = []
            elif btype == 1:
                self.interfaces.append(self._interface(body))
            elif btype == 6:
                yield self._packet(body)
        del self.buf[:off]

    def _interface(self, body: bytes) -> tuple[int, int]:
        linktype = struct.unpack_from(self.endian + "H", body, 0)[0]
        ns_per_tick, o = 1000, 8  # pcapng's default resolution is microseconds
        while o + 4 <= len(body):
            code, length = struct.unpack_from(self.endian + "HH", body, o)
            if code == 0:
                break
            if code == 9:  # if_tsresol: 10^-n, or 2^-n with the top bit set (not used here)
                res = body[o + 4]
                ns_per_tick = 10 ** max(0, 9 - res) if res < 0x80 else 1
            o += 4 + (length + 3) // 4 * 4
        return linktype, ns_per_tick

    def _packet(self, body: bytes) -> Packet:
        iface, hi, lo, caplen, _ = struct.unpack_from(self.endian + "IIIII", body, 0)
        linktype, ns_per_tick = self.interfaces[iface]
        return Packet(linktype, ((hi << 32) | lo) * ns_per_tick, body[20 : 20 + caplen])


# --- TCP segments out of captured packets ---------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """A TCP segment: its flow, sequence number, flags, captured payload and full length."""

    flow: tuple[bytes, int]  # source address and port: one client connection's direction
    seq: int
    flags: int
    payload: bytes
    length: int  # payload bytes on the wire (more than ``payload`` when the capture cut it)


LINK_HEADER = {1: (14, 12), 113: (16, 14), 276: (20, 0)}
"""Link type -> (header length, offset of its EtherType): Ethernet (Linux lo), SLL, SLL2."""


def tcp_segment(packet: Packet) -> Segment | None:
    """The TCP segment in an IPv4 or IPv6 packet, or None for anything else."""
    if packet.linktype not in LINK_HEADER:
        return None
    data, (skip, at) = packet.data, LINK_HEADER[packet.linktype]
    if len(data) < skip + 40:
        return None
    ethertype = struct.unpack_from("!H", data, at)[0]
    if ethertype == 0x0800 and data[skip + 9] == 6:
        ihl = (data[skip] & 0x0F) * 4
        ip_len = struct.unpack_from("!H", data, skip + 2)[0] - ihl
        src, tcp = data[skip + 12 : skip + 16], skip + ihl
    elif ethertype == 0x86DD and data[skip + 6] == 6:
        ip_len = struct.unpack_from("!H", data, skip + 4)[0]
        src, tcp = data[skip + 8 : skip + 24], skip + 40
    else:
        return None
    if len(data) < tcp + 20:
        return None
    sport, _, seq = struct.unpack_from("!HHI", data, tcp)
    header = (data[tcp + 12] >> 4) * 4
    return Segment((src, sport), seq, data[tcp + 13], data[tcp + header :], ip_len - header)


# --- MQTT frames out of one connection's byte stream ----------------------------------------


@dataclass(frozen=True)
class WireMessage:
    """A PUBLISH seen on the wire: its mqbench header and when its first byte left."""

    pub: int
    seq: int
    t_sent_ns: int
    t_wire_ns: int


def _frame_head(buf: bytearray | bytes) -> tuple[int, int] | None:
    """(fixed header length, remaining length) of the MQTT frame at ``buf[0]``, or None
    while the remaining length is incomplete; a malformed length raises ValueError."""
    value = 0
    for i in range(1, min(len(buf), 5)):
        value |= (buf[i] & 0x7F) << (7 * (i - 1))
        if not buf[i] & 0x80:
            return i + 1, value
    if len(buf) >= 5:
        raise ValueError("an MQTT remaining length longer than 4 bytes")
    return None


def publish_header(frame: bytes | bytearray, head: int, remaining: int) -> tuple[int, int, int]:
    """(pub, seq, t_sent) of an MQTT 3.1.1 PUBLISH frame whose first ``head`` bytes are its
    fixed header; ``frame`` holds at least up to the end of the mqbench header."""
    topic_len = struct.unpack_from("!H", frame, head)[0]
    at = head + 2 + topic_len + (2 if frame[0] & 0x06 else 0)  # packet id when QoS > 0
    if at + HEADER.size > head + remaining:
        raise ValueError("a PUBLISH too short for the mqbench header")
    pub, seq, t_sent, _ = HEADER.unpack_from(frame, at)
    return pub, seq, t_sent


def _needed(buf: bytearray, head: int, remaining: int) -> int:
    """Bytes of a frame that must be in hand before it is parsed (the rest is skipped)."""
    if buf[0] >> 4 != PUBLISH:
        return head
    if len(buf) < head + 2:
        return head + 2
    topic_len = struct.unpack_from("!H", buf, head)[0]
    return min(head + remaining, head + 2 + topic_len + 2 + HEADER.size)


@dataclass
class FrameStream:
    """One client connection's bytes towards the broker, split into MQTT frames.

    Segments come in capture order. Only the start of each frame is kept (up to the end of
    a PUBLISH's mqbench header); the rest is skipped as it arrives, so a segment the capture
    cut short is harmless when the missing bytes are inside a frame's body. Missing bytes
    that a frame boundary depends on (a capture gap, a header in a cut part) lose the stream
    until a segment starts with a PUBLISH carrying a plausible header (``desyncs``)."""

    next_seq: int | None = None
    buf: bytearray = field(default_factory=bytearray)
    starts: deque[tuple[int, int]] = field(default_factory=deque)  # (stream offset, t_ns)
    offset: int = 0  # stream offset of buf[0] (or of the skipped bytes' end)
    skip: int = 0  # bytes of the current frame still to drop
    synced: bool = True
    desyncs: int = 0
    malformed: int = 0

    def feed(self, segment: Segment, t_ns: int) -> list[WireMessage]:
        """The PUBLISH frames whose header this segment completes."""
        if segment.flags & (SYN | RST):
            self.next_seq = (segment.seq + 1) & 0xFFFFFFFF if segment.flags & SYN else None
            self._reset(synced=True)
            return []
        payload, length, seq = segment.payload, segment.length, segment.seq
        if length <= 0:
            return []
        if self.next_seq is None:  # first data of a flow seen mid-way: trust a frame start
            self.next_seq = seq
        ahead = ((seq - self.next_seq + 2**31) & 0xFFFFFFFF) - 2**31
        if ahead < 0:  # a retransmission: drop what was already seen
            if -ahead >= length:
                return []
            payload, length, ahead = payload[-ahead:], length + ahead, 0
        self.next_seq = (self.next_seq + ahead + length) & 0xFFFFFFFF
        if ahead > 0:
            self._lose()
        if not self.synced and not self._resync(payload, t_ns):
            return []
        return self._take(payload, length, t_ns)

    def _reset(self, synced: bool) -> None:
        self.buf.clear()
        self.starts.clear()
        self.offset, self.skip, self.synced = 0, 0, synced

    def _lose(self) -> None:
        if self.synced:
            self.desyncs += 1
        self._reset(synced=False)

    def _resync(self, payload: bytes, t_ns: int) -> bool:
        """Whether ``payload`` starts with a PUBLISH whose header is plausible."""
        try:
            head = _frame_head(payload) if payload and payload[0] >> 4 == PUBLISH else None
            if head is None:
                return False
            _, _, t_sent = publish_header(payload, *head)
        except (ValueError, struct.error):
            return False
        self.synced = abs(t_ns - t_sent) < SAME_HOUR_NS
        return self.synced

    def _take(self, payload: bytes, length: int, t_ns: int) -> list[WireMessage]:
        start = self.offset + len(self.buf)  # with bytes to skip, buf is empty
        dropped = min(self.skip, len(payload))
        self.skip -= dropped
        self.offset += dropped
        if dropped < len(payload):
            self.starts.append((start + dropped, t_ns))
            self.buf += payload[dropped:]
        found = self._frames()
        missing = length - len(payload)  # the capture cut the segment
        if missing > 0:
            if self.buf or missing > self.skip:
                self._lose()
            else:
                self.skip -= missing
                self.offset += missing
        return found

    def _frames(self) -> list[WireMessage]:
        found: list[WireMessage] = []
        while self.buf:
            try:
                head = _frame_head(self.buf)
            except ValueError:
                self.malformed += 1
                self._lose()
                break
            if head is None or len(self.buf) < _needed(self.buf, *head):
                break
            while len(self.starts) > 1 and self.starts[1][0] <= self.offset:
                self.starts.popleft()
            if self.buf[0] >> 4 == PUBLISH:
                message = self._publish(*head)
                if message is not None:
                    found.append(message)
            frame = head[0] + head[1]
            taken = min(frame, len(self.buf))
            del self.buf[:taken]
            self.offset += taken
            self.skip = frame - taken
        return found

    def _publish(self, head: int, remaining: int) -> WireMessage | None:
        t_wire = self.starts[0][1]  # the segment holding the frame's first byte
        try:
            pub, seq, t_sent = publish_header(self.buf, head, remaining)
        except (ValueError, struct.error):
            self.malformed += 1
            return None
        return WireMessage(pub, seq, t_sent, t_wire)


@dataclass
class WireLog:
    """Every PUBLISH of a capture, by connection; the first sighting of each (pub, seq)."""

    streams: dict[tuple[bytes, int], FrameStream] = field(default_factory=dict)
    messages: dict[tuple[int, int], WireMessage] = field(default_factory=dict)
    packets: int = 0

    def add(self, packet: Packet) -> None:
        """Take one captured packet."""
        self.packets += 1
        segment = tcp_segment(packet)
        if segment is None:
            return
        stream = self.streams.setdefault(segment.flow, FrameStream())
        for message in stream.feed(segment, packet.t_ns):
            self.messages.setdefault((message.pub, message.seq), message)

    @property
    def desyncs(self) -> int:
        """Times a connection's frame boundaries were lost."""
        return sum(s.desyncs for s in self.streams.values())


# --- the capture process -------------------------------------------------------------------


def capture_filter(port: int) -> str:
    """Client -> broker on ``port``: data segments, SYN and FIN (IPv4; no pure ACKs)."""
    data = "(ip[2:2] - ((ip[0] & 0xf) << 2) - ((tcp[12] & 0xf0) >> 2)) > 0"
    return f"tcp dst port {port} and (tcp[tcpflags] & (tcp-syn|tcp-fin|tcp-rst) != 0 or {data})"


class Capture:
    """``tshark`` on ``lo`` for one port, parsed while it runs; always stopped by its PID."""

    def __init__(self, tshark: str, port: int, seconds: float, packets: int, snaplen: int):
        argv = [tshark, "-i", "lo", "-n", "-q", "-B", "64", "-s", str(snaplen)]
        argv += ["-f", capture_filter(port), "-w", "-"]
        argv += ["-a", f"duration:{max(1, int(seconds))}", "-c", str(packets)]
        self.log = WireLog()
        self.stderr: list[str] = []
        self._started = threading.Event()
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True),
            threading.Thread(target=self._watch, args=(self.proc.stderr,), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def wait_started(self) -> None:
        """Block until tshark captures (it prints ``Capture started``), or raise."""
        if not self._started.wait(TSHARK_START_S) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("tshark did not start: " + " | ".join(self.stderr[-3:]))

    def _read(self, pipe: BinaryIO) -> None:
        reader = PcapngReader()
        while chunk := pipe.read1(1 << 20):  # type: ignore[attr-defined]
            for packet in reader.feed(chunk):
                self.log.add(packet)

    def _watch(self, pipe: BinaryIO) -> None:
        for raw in pipe:
            line = raw.decode(errors="replace").strip()
            self.stderr.append(line)
            if "Capture started" in line:
                self._started.set()
            elif "Capturing on" in line:  # a tshark that never says "Capture started"
                timer = threading.Timer(CAPTURE_SETTLE_S, self._started.set)
                timer.daemon = True
                timer.start()

    def stop(self) -> None:
        """SIGINT to tshark (it stops dumpcap and flushes), SIGKILL to its group if it hangs."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(STOP_WAIT_S)
        for reader in self._readers:
            reader.join(STOP_WAIT_S)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()

    def dropped(self) -> str:
        """tshark's own line about packets it dropped, if any."""
        return next((line for line in self.stderr if "dropped" in line), "")


def clock_check(tshark: str) -> dict[str, Any]:
    """Capture stamps between the two ``time.time_ns()`` reads around their ``sendall``
    (``inside`` of ``probes``), and the stamp -> wire p50 of such a bare send (µs)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    capture = Capture(tshark, port, 30, 200, 0)
    bounds: dict[int, tuple[int, int]] = {}
    try:
        capture.wait_started()
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            server, _ = listener.accept()
            with server:
                for k in range(20):
                    before = time.time_ns()
                    client.sendall(_probe_frame(k, before))
                    bounds[k] = (before, time.time_ns())
                    server.recv(4096)
                    time.sleep(0.02)
        time.sleep(0.5)
    finally:
        capture.stop()
        listener.close()
    seen = [(bounds[seq], m.t_wire_ns) for (_, seq), m in capture.log.messages.items()]
    inside = sum(1 for (before, after), wire in seen if before <= wire <= after)
    deltas = [wire - before for (before, _), wire in seen]
    return {
        "inside": inside,
        "probes": len(bounds),
        "bare_send_p50_us": pct(deltas, 50) if deltas else None,
    }


def _probe_frame(seq: int, t_sent: int) -> bytes:
    """A QoS 0 PUBLISH on topic ``p`` carrying a header (what the capture parser reads)."""
    body = struct.pack("!H", 1) + b"p" + HEADER.pack(0, seq, t_sent, 0)
    return bytes([0x30, len(body)]) + body


# --- one cell ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CellPlan:
    """What one ``mqbench run`` measures."""

    engine: str
    payload: str
    pairs: int
    rate: float
    warmup: float
    duration: float
    repeat: int


def scenario_yaml(plan: CellPlan, port: int) -> str:
    """The scenario of one cell (keys of docs/scenarios.md that exist before and after)."""
    return "\n".join(
        [
            "name: send-path",
            "description: benchmarks/send_path.py, one cell",
            "targets: [mosquitto]",
            "runtime: native",
            "workload:",
            "  topology: pairs",
            f"  pairs: {plan.pairs}",
            f"  rate: {plan.rate:g}",
            f"  payload: {plan.payload}",
            "  qos: 0",
            f"  warmup: {plan.warmup:g}s",
            f"  duration: {plan.duration:g}s",
            "  drain: 2s",
            "generator:",
            f"  hot_path: {plan.engine}",
            "broker:",
            f"  port: {port}",
            "seed: 1",
            "",
        ]
    )


def free_port() -> int:
    """A loopback port nothing listens on now (mosquitto binds it a moment later)."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


def pct(values: list[int], q: float) -> float:
    """Nearest-rank percentile (docs/results.md) of ``values`` in µs."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * int(q * 10) // 1000))
    return ordered[rank - 1] / 1e3


def wire_stats(log: WireLog | None, start_ns: int, end_ns: int) -> dict[str, Any]:
    """Send stamp -> wire over the messages whose t_sent is in ``[start_ns, end_ns)``."""
    if log is None:
        return {"matched": None, "wire_p50_us": None, "wire_p99_us": None}
    deltas = [
        m.t_wire_ns - m.t_sent_ns for m in log.messages.values() if start_ns <= m.t_sent_ns < end_ns
    ]
    return {
        "matched": len(deltas),
        "wire_p50_us": pct(deltas, 50) if deltas else None,
        "wire_p99_us": pct(deltas, 99) if deltas else None,
        "wire_negative": sum(1 for d in deltas if d < 0),
        "desyncs": log.desyncs,
        "packets": log.packets,
    }


def run_cell(plan: CellPlan, tshark: str | None, args: argparse.Namespace) -> dict[str, Any]:
    """One ``mqbench run`` under capture; its row."""
    from mqbench.analysis.numpy_ref import analyze_cell_numpy

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="send_path-", dir=args.tmp) as tmp:
        folder = Path(tmp)
        (folder / "cell.yaml").write_text(scenario_yaml(plan, port))
        argv = [sys.executable, "-m", "mqbench", "run", str(folder / "cell.yaml")]
        argv += ["--out", str(folder / "results"), "--no-analyze", "--format", "json"]
        for setting in args.set or []:
            argv += ["--set", setting]
        seconds = plan.warmup + plan.duration + 2 + 120
        messages = int(plan.pairs * plan.rate * (plan.warmup + plan.duration + 2))
        capture = (
            Capture(tshark, port, seconds, 4 * messages + 10_000, args.snaplen) if tshark else None
        )
        try:
            if capture is not None:
                capture.wait_started()
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=seconds, check=False
            )
        finally:
            if capture is not None:
                capture.stop()
        if done.returncode != 0:
            raise RuntimeError(
                f"mqbench run exited {done.returncode}: {done.stderr.strip()[-400:]}"
            )
        run = next((folder / "results" / "send-path").iterdir())
        cell = json.loads((run / "manifest.json").read_text())["cells"][0]
        summary = analyze_cell_numpy(cell, run / "cells" / cell["id"]).to_dict()
        if args.keep:
            shutil.copytree(
                run,
                Path(args.keep) / f"{len(os.listdir(args.keep)):03d}-{cell['id']}-{plan.engine}",
            )
    row = _row(plan, cell, summary)
    row |= wire_stats(
        capture.log if capture else None, cell["window"]["start_ns"], cell["window"]["end_ns"]
    )
    row["tshark_dropped"] = capture.dropped() if capture else ""
    return row


def _row(plan: CellPlan, cell: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    workers = cell.get("generator", {}).get("workers", [])
    return {
        "engine_asked": plan.engine,
        "engine": cell.get("hot_path", {}).get("engine", "?"),
        "policy": cell.get("timing", {}).get("policy", "?"),
        "payload": plan.payload,
        "pairs": plan.pairs,
        "rate": plan.rate,
        "repeat": plan.repeat,
        "sent": summary["sent"],
        "latency_p50_ms": summary["latency"]["p50_us"] / 1e3,
        "latency_p99_ms": summary["latency"]["p99_us"] / 1e3,
        "send_lag_p99_us": summary["send_lag"]["p99_us"],
        "generator_cpu_cores": summary["generator_cpu_cores_mean"],
        "publish_cpu_fraction": max(
            (w.get("publish_cpu_fraction", 0.0) for w in workers), default=None
        ),
        "valid": summary["valid"],
        "invalid_kinds": [reason["kind"] for reason in summary.get("invalid_reasons", [])],
        "latency_verdict": summary["latency_verdict"],
        "load_1m": os.getloadavg()[0],
    }


# --- output --------------------------------------------------------------------------------

COLUMNS = (
    ("engine", "{:>8}"), ("policy", "{:>6}"), ("payload", "{:>7}"), ("rate", "{:>9}"),
    ("matched", "{:>13}"), ("wire_p50_us", "{:>8.1f}"), ("wire_p99_us", "{:>8.1f}"),
    ("latency_p50_ms", "{:>7.3f}"), ("latency_p99_ms", "{:>7.3f}"),
    ("send_lag_p99_us", "{:>7.1f}"), ("generator_cpu_cores", "{:>6.3f}"), ("load_1m", "{:>5.2f}"),
)  # fmt: skip
TITLES = (
    "engine", "policy", "payload", "pairs x r", "wire/sent", "wire p50", "wire p99",
    "lat p50", "lat p99", "lag p99", "gen cpu", "load",
)  # fmt: skip


def format_row(row: dict[str, Any]) -> str:
    """One table line: µs for wire and lag, ms for latency, cores for CPU."""
    shown = dict(row)
    shown["rate"] = f"{row['pairs']}x{row['rate']:g}"
    shown["matched"] = f"{row['matched']}/{row['sent']}" if row["matched"] is not None else "-"
    if row["engine"] != row["engine_asked"]:
        shown["engine"] = f"{row['engine']}!"
    cells = []
    for (key, fmt), title in zip(COLUMNS, TITLES, strict=True):
        value = shown.get(key)
        width = max(len(title), len(fmt.format(0) if "f" in fmt else fmt.format("")))
        text = "-" if value is None else fmt.format(value)
        cells.append(text.rjust(width))
    notes = [] if row["valid"] else ["invalid: " + ",".join(row["invalid_kinds"])]
    notes += [] if row["latency_verdict"] == "ok" else [row["latency_verdict"]]
    notes += [f"{row['desyncs']} desync"] if row.get("desyncs") else []
    notes += [f"{row['wire_negative']} negative"] if row.get("wire_negative") else []
    notes += [row["tshark_dropped"]] if row.get("tshark_dropped") else []
    return " ".join(cells) + ("  " + "; ".join(notes) if notes else "")


def header_line() -> str:
    """The table's titles, aligned with ``format_row``."""
    widths = [
        max(len(t), len(f.format(0) if "f" in f else f.format("")))
        for (_, f), t in zip(COLUMNS, TITLES, strict=True)
    ]
    return " ".join(t.rjust(w) for t, w in zip(TITLES, widths, strict=True))


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """python / compiled of the wire p50 (median over repeats) per payload and rate."""
    groups: dict[tuple[str, int, float], dict[str, list[float]]] = {}
    for row in rows:
        if row.get("wire_p50_us") is not None:
            key = (row["payload"], row["pairs"], row["rate"])
            groups.setdefault(key, {}).setdefault(row["engine"], []).append(row["wire_p50_us"])
    out = []
    for (payload, pairs, rate), by in groups.items():
        if "python" in by and "compiled" in by:
            py, core = statistics.median(by["python"]), statistics.median(by["compiled"])
            out.append({"payload": payload, "pairs": pairs, "rate": rate, "python_us": py,
                        "compiled_us": core, "ratio": py / core if core else None})  # fmt: skip
    return out


def parse_rates(text: str) -> list[tuple[int, float]]:
    """``10x10,20x50`` -> [(10, 10.0), (20, 50.0)]: pairs x msg/s per publisher."""
    out = []
    for item in text.split(","):
        pairs, _, rate = item.partition("x")
        out.append((int(pairs), float(rate)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="python,compiled", help="alternated in this order")
    parser.add_argument("--sizes", default="1KiB,16KiB", help="payloads, mqbench syntax")
    parser.add_argument("--rates", default="10x10,20x50", help="PAIRSxRATE (msg/s per publisher)")
    parser.add_argument("--warmup", type=float, default=5.0, help="s per cell")
    parser.add_argument("--duration", type=float, default=20.0, help="measured s per cell")
    parser.add_argument("--repeats", type=int, default=2, help="of each engine per size/rate")
    parser.add_argument("--snaplen", type=int, default=0, help="tshark -s (0: whole packets)")
    parser.add_argument("--set", action="append", help="passed on to mqbench run --set")
    parser.add_argument("--tmp", default=None, help="where each cell's results folder goes")
    parser.add_argument("--keep", default=None, help="copy each run's folder into this folder")
    parser.add_argument("--no-clock-check", action="store_true")
    parser.add_argument("--json", action="store_true", help="rows as JSON on stdout")
    args = parser.parse_args()
    return run(args)


def run(args: argparse.Namespace) -> int:
    """Every cell, alternating engines, then the ratios."""
    out = sys.stderr if args.json else sys.stdout
    tshark = shutil.which("tshark") or (
        "/usr/bin/tshark" if os.access("/usr/bin/tshark", os.X_OK) else None
    )
    import mqbench

    checkout = Path(mqbench.__file__).resolve().parent.parent
    print(f"# mqbench from {checkout} ({_commit(checkout)}), {sys.executable}", file=out)
    print(f"# load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", file=out)
    clock = None
    if tshark is None:
        print("# tshark not found: the wire columns are skipped (-)", file=out)
    elif not args.no_clock_check:
        clock = clock_check(tshark)
        print(
            f"# clock check: {clock['inside']} of {clock['probes']} capture stamps between the "
            "two time.time_ns() reads around their send; a bare sendall from this process: "
            f"stamp -> wire p50 {clock['bare_send_p50_us'] or 0:.1f} µs",
            file=out,
        )
    print(header_line(), file=out, flush=True)
    rows = []
    try:
        for payload in args.sizes.split(","):
            for pairs, rate in parse_rates(args.rates):
                for repeat in range(args.repeats):
                    for engine in args.engines.split(","):
                        plan = CellPlan(
                            engine, payload, pairs, rate, args.warmup, args.duration, repeat
                        )
                        rows.append(run_cell(plan, tshark, args))
                        print(format_row(rows[-1]), file=out, flush=True)
    except KeyboardInterrupt:
        print("# interrupted: the cells so far", file=out)
    summary = ratios(rows)
    for r in summary:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(
            f"# python/compiled wire p50 {r['payload']} {r['pairs']}x{r['rate']:g}: "
            f"{r['python_us']:.1f} / {r['compiled_us']:.1f} µs = {ratio}",
            file=out,
        )
    print(f"# load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", file=out)
    if args.json:
        print(
            json.dumps(
                {"checkout": str(checkout), "clock_check": clock, "rows": rows, "ratios": summary},
                indent=1,
            )
        )
    return 0


def _commit(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.strip() or "no git"


if __name__ == "__main__":
    sys.exit(main())
