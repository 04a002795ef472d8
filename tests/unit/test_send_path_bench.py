"""The capture parser of benchmarks/send_path.py: mqbench headers out of a client's TCP
segments, whatever the segment boundaries, and out of a pcapng stream fed in pieces."""

from __future__ import annotations

import importlib.util
import itertools
import struct
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "send_path.py"


@pytest.fixture(scope="module")
def sp() -> ModuleType:
    spec = importlib.util.spec_from_file_location("send_path_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while they are built
    spec.loader.exec_module(module)
    return module


T0 = 1_795_000_000_000_000_000
SYN = 0x02


def publish(seq: int, payload: int, qos: int = 0, pub: int = 3) -> bytes:
    """An MQTT 3.1.1 PUBLISH carrying an mqbench header and filler up to ``payload`` bytes."""
    topic = b"mqbench/run/cell/3"
    packet_id = b"\x00\x07" if qos else b""
    body = struct.pack("!H", len(topic)) + topic + packet_id
    body += struct.pack("<IIqq", pub, seq, T0 + seq, 0) + b"x" * (payload - 24)
    length, encoded = len(body), bytearray()
    while True:
        byte, length = length & 0x7F, length >> 7
        encoded.append(byte | (0x80 if length else 0))
        if not length:
            break
    return bytes([0x30 | qos << 1]) + bytes(encoded) + body


def segments(sp: ModuleType, stream: bytes, cuts: list[int], isn: int = 1000) -> list:
    """The stream's segments split at ``cuts`` (stream offsets), after a SYN."""
    out = [sp.Segment((b"\x7f\x00\x00\x01", 40000), isn, SYN, b"", 0)]
    edges = [0, *cuts, len(stream)]
    for a, b in itertools.pairwise(edges):
        out.append(sp.Segment((b"\x7f\x00\x00\x01", 40000), isn + 1 + a, 0x18, stream[a:b], b - a))
    return out


def feed(stream_parser, segs: list, times: list[int]) -> list:
    found = []
    for seg, t in zip(segs, times, strict=True):
        found += stream_parser.feed(seg, t)
    return found


def test_each_publish_gets_the_time_of_the_segment_holding_its_first_byte(sp: ModuleType) -> None:
    connect = bytes([0x10, 2, 0, 0])
    frames = [publish(k, 16 * 1024 if k % 2 else 1024, qos=k % 2) for k in range(4)]
    stream = connect + b"".join(frames)
    starts = [len(connect) + sum(map(len, frames[:k])) for k in range(4)]
    # frame 0 shares a segment with the CONNECT; frame 1 starts mid-segment and spans three;
    # frame 2's fixed header is split from its topic; frame 3 follows it in one segment
    cuts = [starts[1] - 10, starts[1] + 5, starts[1] + 9000, starts[2] + 1]
    segs = segments(sp, stream, cuts)
    found = feed(sp.FrameStream(), segs, [0, 100, 200, 300, 400, 500])
    assert [(m.seq, m.t_sent_ns - T0, m.t_wire_ns) for m in found] == [
        (0, 0, 100),
        (1, 1, 200),
        (2, 2, 400),
        (3, 3, 500),
    ]


def test_a_segment_cut_by_the_snaplen_inside_a_frame_body_loses_nothing(sp: ModuleType) -> None:
    frames = [publish(k, 16 * 1024) for k in range(3)]
    parser, found = sp.FrameStream(), []
    found += parser.feed(segments(sp, b"", [])[0], 0)
    seq = 1001
    for k, frame in enumerate(frames):
        cut = sp.Segment((b"\x7f\x00\x00\x01", 40000), seq, 0x18, frame[:200], len(frame))
        found += parser.feed(cut, 10 * (k + 1))
        seq += len(frame)
    assert [(m.seq, m.t_wire_ns) for m in found] == [(0, 10), (1, 20), (2, 30)]
    assert parser.desyncs == 0


def test_a_capture_gap_loses_the_stream_until_a_segment_starts_with_a_publish(
    sp: ModuleType,
) -> None:
    frames = [publish(k, 1024) for k in range(4)]
    size = len(frames[0])
    segs = segments(sp, b"".join(frames), [size, 2 * size + 5, 3 * size])
    del segs[2]  # the capture missed frame 1 and the start of frame 2
    parser = sp.FrameStream()
    found = feed(parser, segs, [T0, T0 + 10, T0 + 30, T0 + 40])  # near t_sent: plausible
    assert [m.seq for m in found] == [0, 3]
    assert parser.desyncs == 1


def test_a_retransmitted_segment_is_not_read_twice(sp: ModuleType) -> None:
    frames = [publish(k, 1024) for k in range(2)]
    segs = segments(sp, b"".join(frames), [len(frames[0])])
    parser = sp.FrameStream()
    found = feed(parser, [*segs, segs[1], segs[2]], [0, 10, 20, 30, 40])
    assert [(m.seq, m.t_wire_ns) for m in found] == [(0, 10), (1, 20)]


def ethernet_ipv4_tcp(payload: bytes, seq: int, sport: int = 40000) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", sport, 1883, seq, 0, 5 << 4, 0x18, 65535, 0, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 0, 0, 64, 6, 0,
                     b"\x7f\0\0\1", b"\x7f\0\0\1")  # fmt: skip
    return b"\0" * 12 + b"\x08\x00" + ip + tcp + payload


def pcapng(packets: list[tuple[int, bytes]]) -> bytes:
    """A little-endian pcapng stream: section, one Ethernet interface at ns, the packets."""

    def block(kind: int, body: bytes) -> bytes:
        body += b"\0" * (-len(body) % 4)
        return struct.pack("<II", kind, len(body) + 12) + body + struct.pack("<I", len(body) + 12)

    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += block(1, struct.pack("<HHI", 1, 0, 0) + struct.pack("<HHB3x", 9, 1, 9) + bytes(4))
    for t_ns, data in packets:
        head = struct.pack("<IIIII", 0, t_ns >> 32, t_ns & 0xFFFFFFFF, len(data), len(data))
        out += block(6, head + data)
    return out


def test_a_pcapng_stream_fed_in_pieces_gives_each_publish_with_its_capture_time(
    sp: ModuleType,
) -> None:
    frames = [publish(k, 1024) for k in range(3)]
    size = len(frames[0])
    raw = pcapng(
        [(T0 + 1000 * (k + 1), ethernet_ipv4_tcp(f, 1 + size * k)) for k, f in enumerate(frames)]
    )
    reader, log = sp.PcapngReader(), sp.WireLog()
    for at in range(0, len(raw), 333):
        for packet in reader.feed(raw[at : at + 333]):
            log.add(packet)
    assert log.packets == 3
    assert {k: m.t_wire_ns - m.t_sent_ns for k, m in log.messages.items()} == {
        (3, 0): 1000,
        (3, 1): 1999,
        (3, 2): 2998,
    }


def test_percentiles_are_nearest_rank_in_microseconds(sp: ModuleType) -> None:
    values = [k * 1000 for k in range(1, 101)]
    assert (sp.pct(values, 50), sp.pct(values, 99)) == (50.0, 99.0)
