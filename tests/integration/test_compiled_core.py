"""The compiled core (``mqbench_core``) against the Python engine: the same records.

Without a broker: a core publishing over TCP pairs writes exactly the frames and the send
records the Python engine writes for the same schedule, and turns lost connections into
failed sends and a report. With real brokers (mosquitto, NATS, Redis, started by mqbench):
the same cell run on both engines (``generator.hot_path``) leaves the same files, the same
send and delivery keys and the same analysis counts, and the manifest names each engine.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import mqbench
from mqbench.analysis.numpy_ref import analyze_cell_numpy
from mqbench.cli.app import app
from mqbench.records.cell_entry import CellEntry
from mqbench.records.format import HEADER, RECORD_DTYPE, SEND_FAILED, SEND_OK, pack_record
from mqbench.records.integrity import check_record_file
from mqbench.records.intended import intended_ns
from mqbench.records.writer import RecordWriter
from mqbench.wire.mqtt.packets import encode_publish, publish_prefix
from mqbench.workload.core_sources import checkout_core, sources_digest
from mqbench.workload.hot_path import core_install
from mqbench.workload.publish_loop import InterleavedSchedule

pytestmark = pytest.mark.integration
core = pytest.importorskip("mqbench_core", reason="the compiled core is not installed")
runner = CliRunner()

TOPIC = b"t/1"
PAYLOAD = 64


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        near = socket.create_connection(listener.getsockname())
        far, _ = listener.accept()
    return near, far


def read_exactly(sock: socket.socket, size: int, timeout_s: float = 10.0) -> bytes:
    sock.settimeout(timeout_s)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


class Harness:
    """A core with publishers and one subscriber on TCP pairs whose far ends the test holds."""

    def __init__(
        self, folder: Path, publishers: int, messages: int, rate: float, coalesce_ns: int = 0
    ) -> None:
        self.deliveries = RecordWriter(folder / "deliveries-0.bin")
        self.sends = RecordWriter(folder / "sends-0.bin")
        self.start_ns = time.time_ns() + 300_000_000
        self.args = (rate, publishers, messages)
        self.core: Any = core.Core(
            "mqtt",
            self.deliveries.lend(),
            self.sends.lend(),
            self.start_ns,
            rate,
            publishers,
            0,
            publishers,
            messages,
            PAYLOAD,
            0,
            5_000_000,
            True,
            60.0,
            1 << 20,
            coalesce_ns,
        )
        self.pubs = [tcp_pair() for _ in range(publishers)]
        self.sub = tcp_pair()
        self.head = publish_prefix(TOPIC, PAYLOAD, 0)
        for index, (near, _) in enumerate(self.pubs):
            self.core.add_publisher(os.dup(near.fileno()), index, self.head, b"")
        self.core.add_subscriber(os.dup(self.sub[0].fileno()), 7)
        self.thread = threading.Thread(target=self.core.run)

    def __enter__(self) -> Harness:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        for near, far in [*self.pubs, self.sub]:
            near.close()
            far.close()

    def stop(self) -> dict[str, int]:
        self.core.stop()
        self.thread.join(10)
        stats: dict[str, int] = self.core.stats()
        for writer, kind in ((self.deliveries, "deliveries"), (self.sends, "sends")):
            writer.adopt(stats[kind], stats[f"{kind}_written"], stats[f"{kind}_errno"])
            writer.close()
        return stats


def test_the_installed_core_was_built_from_this_checkouts_sources() -> None:
    # scripts/install.sh bakes the digest in; a stale core would leave every cell of this
    # suite to the Python engine, and the "compiled" runs below would be refused.
    checkout = checkout_core(Path(mqbench.__file__).resolve().parent)
    assert checkout is not None
    assert core.__sources__ == sources_digest(checkout)
    assert core_install().version == core.__version__


def test_the_core_sends_the_frames_and_writes_the_send_records_of_the_python_engine(
    tmp_path: Path,
) -> None:
    rate, publishers, messages = 50.0, 3, 2
    with Harness(tmp_path, publishers, messages, rate) as h:
        frames = [read_exactly(far, messages * (len(h.head) + PAYLOAD)) for _, far in h.pubs]
        # echo every payload to the subscriber as the broker would deliver it
        payloads = [
            f[k * (len(h.head) + PAYLOAD) + len(h.head) : (k + 1) * (len(h.head) + PAYLOAD)]
            for f in frames
            for k in range(messages)
        ]
        h.sub[1].sendall(b"".join(encode_publish(TOPIC, p) for p in payloads))
        time.sleep(0.3)
        stats = h.stop()
    # every frame is the PUBLISH head, then the 24-byte header and zero padding
    sent_at: dict[tuple[int, int], int] = {}
    for pub, data in enumerate(frames):
        for seq in range(messages):
            frame = data[seq * (len(h.head) + PAYLOAD) :][: len(h.head) + PAYLOAD]
            assert frame[: len(h.head)] == h.head
            p, s, t_sent, spare = HEADER.unpack_from(frame, len(h.head))
            assert (p, s, spare) == (pub, seq, 0)
            assert frame[len(h.head) + HEADER.size :] == bytes(PAYLOAD - HEADER.size)
            assert t_sent >= intended_ns(h.start_ns, rate, publishers, pub, seq)  # never early
            sent_at[pub, seq] = t_sent
    # the send records, byte for byte, are what the Python engine writes in schedule order
    schedule = InterleavedSchedule(h.start_ns, rate, publishers, 0, publishers, messages)
    expected = b""
    while not schedule.finished:
        pub, seq = schedule.current()
        expected += pack_record(sent_at[pub, seq], 0, pub, SEND_OK, seq)
        schedule.advance()
    assert (tmp_path / "sends-0.bin").read_bytes() == expected
    # deliveries: the header's fields, the subscriber's index, kernel-stamped latency
    got = np.fromfile(tmp_path / "deliveries-0.bin", dtype=RECORD_DTYPE)
    keys = list(zip(got["pub"].tolist(), got["seq"].tolist(), strict=True))
    assert sorted(keys) == sorted(sent_at)
    assert set(got["sub"].tolist()) == {7}
    assert [sent_at[k] for k in keys] == got["t_sent"].tolist()
    assert ((got["lat"] >= 0) & (got["lat"] < 10_000_000)).all()
    assert stats["kernel_reads"] >= 1 and stats["user_reads"] == 0
    for name, count in (("sends-0.bin", publishers * messages), ("deliveries-0.bin", 6)):
        check = check_record_file(tmp_path / name)
        assert (check.records, check.counted, check.closed) == (count, count, True)
        assert not check.truncated


def test_with_a_coalescing_window_sends_leave_together_never_early(tmp_path: Path) -> None:
    # 4 publishers x 100 msg/s: a send due every 2.5 ms; a 20 ms window sends about eight
    # at each wake-up instead of one
    publishers, messages, rate = 4, 40, 100.0
    with Harness(tmp_path, publishers, messages, rate, coalesce_ns=20_000_000) as h:
        frame = len(h.head) + PAYLOAD
        for _, far in h.pubs:
            read_exactly(far, messages * frame)
        stats = h.stop()
    sends = np.fromfile(tmp_path / "sends-0.bin", dtype=RECORD_DTYPE)
    assert len(sends) == publishers * messages and (sends["sub"] == SEND_OK).all()
    intended = [
        intended_ns(h.start_ns, rate, publishers, int(p), int(q))
        for p, q in zip(sends["pub"], sends["seq"], strict=True)
    ]
    lag = sends["t_sent"] - np.array(intended)
    assert (lag >= 0).all()  # never before its intended time
    assert stats["wakeups"] * 3 < len(sends)  # batched: far fewer wake-ups than sends


def test_an_idle_subscriber_pings_soon_after_the_core_takes_it_over(tmp_path: Path) -> None:
    # the lending client may have been idle for a whole keepalive (60 s here) already, and
    # the broker drops a connection after 1.5: the core must not wait another half
    with Harness(tmp_path, 1, 1, 50.0) as h:
        ping = read_exactly(h.sub[1], 2, timeout_s=5.0)  # the old first tick came at 30 s
    assert ping == b"\xc0\x00"  # PINGREQ


def test_a_lost_connection_turns_later_sends_into_failed_records_and_is_reported(
    tmp_path: Path,
) -> None:
    with Harness(tmp_path, publishers=1, messages=40, rate=100.0) as h:
        read_exactly(h.pubs[0][1], len(h.head) + PAYLOAD)  # the first message arrives
        h.pubs[0][1].close()  # the broker's side goes away
        h.sub[1].close()
        time.sleep(0.6)
        lost = h.core.take_lost()
        stats = h.stop()
    sends = np.fromfile(tmp_path / "sends-0.bin", dtype=RECORD_DTYPE)
    assert len(sends) == 40
    assert sends["sub"][0] == SEND_OK and sends["sub"][-1] == SEND_FAILED
    failed = sends[sends["sub"] == SEND_FAILED]
    assert stats["send_failed"] == len(failed) > 0
    assert sorted(role for role, _, _ in lost) == ["pub", "sub"]
    assert stats["disconnects"] == 2 and stats["connected"] == 0
    reasons = {role: why for role, _, why in lost}
    assert reasons["sub"] == "connection closed by the server"


def test_a_lost_connection_lent_again_is_taken_over_and_held_deliveries_are_written(
    tmp_path: Path,
) -> None:
    # the Python side reconnects a lost client and lends the new session back (readopt):
    # sends go out on it again, and deliveries its client received meanwhile are written
    held = pack_record(123, 4, 0, 7, 99)
    frame = len(publish_prefix(TOPIC, PAYLOAD, 0)) + PAYLOAD
    with Harness(tmp_path, publishers=1, messages=100, rate=50.0) as h:
        read_exactly(h.pubs[0][1], frame)
        h.pubs[0][1].close()  # the broker's side goes away
        deadline = time.monotonic() + 5
        lost: list[tuple[str, int, str]] = []
        while not lost and time.monotonic() < deadline:
            time.sleep(0.02)
            lost = h.core.take_lost()
        assert [role for role, _, _ in lost] == ["pub"]
        # stay lost for a few send periods (20 ms each): the loss can be seen from the
        # broker's FIN before any send is due, and the test needs sends during the outage
        time.sleep(0.1)
        near, far = tcp_pair()
        try:
            h.core.readopt("pub", 0, os.dup(near.fileno()), b"")
            h.core.readopt("sub", 7, -1, held)
            again = read_exactly(far, frame)
            stats = h.stop()
        finally:
            near.close()
            far.close()
    assert again[: len(h.head)] == h.head
    sends = np.fromfile(tmp_path / "sends-0.bin", dtype=RECORD_DTYPE)
    flags = sends["sub"].tolist()
    assert flags[0] == SEND_OK and SEND_FAILED in flags
    assert SEND_OK in flags[flags.index(SEND_FAILED) :]  # sending again after the loss
    assert stats["disconnects"] == 1 and stats["connected"] == 2
    deliveries = (tmp_path / "deliveries-0.bin").read_bytes()
    assert deliveries == held


def keys_of(records: np.ndarray) -> list[tuple[int, int, int]]:
    return list(zip(*(records[k].tolist() for k in ("pub", "sub", "seq")), strict=True))


SCENARIO = """\
name: engines
targets: [{target}]
workload: {{pairs: 3, rate: 40, payload: 100B, qos: 0, warmup: 1s, duration: 2s, drain: 1s}}
generator: {{workers: 1, layout: shared, hot_path: {engine}}}
"""


def run_cell(tmp_path: Path, target: str, engine: str) -> tuple[Path, CellEntry]:
    path = tmp_path / f"{target}-{engine}.yaml"
    path.write_text(SCENARIO.format(target=target, engine=engine))
    out = tmp_path / f"out-{engine}"
    result = runner.invoke(app, ["run", str(path), "--out", str(out), "--no-analyze"])
    assert result.exit_code == 0, result.output
    (manifest,) = out.glob("*/*/manifest.json")
    (cell,) = json.loads(manifest.read_text())["cells"]
    return manifest.parent / "cells" / cell["id"], CellEntry.from_dict(cell)


@pytest.mark.parametrize("target", ["mosquitto", "nats", "redis"])
def test_the_same_cell_on_both_engines_leaves_the_same_records_and_counts(
    tmp_path: Path, target: str
) -> None:
    runs = {engine: run_cell(tmp_path, target, engine) for engine in ("python", "compiled")}
    for engine, (_, entry) in runs.items():
        assert entry.hot_path is not None and entry.hot_path.engine == engine
    (py_dir, py_cell), (c_dir, c_cell) = runs["python"], runs["compiled"]
    assert sorted(p.name for p in py_dir.glob("*-0.bin*")) == sorted(
        p.name for p in c_dir.glob("*-0.bin*")
    )
    for kind in ("sends", "deliveries"):
        a = np.fromfile(py_dir / f"{kind}-0.bin", dtype=RECORD_DTYPE)
        b = np.fromfile(c_dir / f"{kind}-0.bin", dtype=RECORD_DTYPE)
        assert sorted(keys_of(a)) == sorted(keys_of(b)), kind
        for folder in (py_dir, c_dir):
            check = check_record_file(folder / f"{kind}-0.bin")
            assert check.closed and not check.truncated, check.describe()
    summaries = [analyze_cell_numpy(entry, d) for d, entry in (runs["python"], runs["compiled"])]
    for s in summaries:
        assert s.valid, s.invalid_reasons
        assert s.lost == 0 and s.duplicates == 0
    assert summaries[0].sent == summaries[1].sent == summaries[1].scheduled
    assert summaries[0].received == summaries[1].received
    assert py_cell.generator is not None and c_cell.generator is not None
    assert c_cell.generator.workers[0].sent == py_cell.generator.workers[0].sent


KILLED = """\
name: killed
targets: redis
runtime: external
broker: {{port: {port}, pid: {pid}}}
workload: {{pairs: 4, rate: 50, payload: 100B, qos: 0, warmup: 1s, duration: 4s, drain: 1s}}
generator: {{workers: 1, layout: shared, hot_path: compiled}}
"""


def kill_subscribers_once_sending(port: int, out: Path, killed: list[tuple[int, bytes]]) -> None:
    """Once the cell sends (its send records grow) and 1.5 s more, have Redis drop every
    subscriber connection (``CLIENT KILL TYPE pubsub``): a broker-side disconnect."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(f.stat().st_size > 0 for f in out.glob("*/*/cells/*/sends-0.bin")):
            break
        time.sleep(0.05)
    time.sleep(1.5)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        killed.append((time.time_ns(), b""))
        sock.sendall(b"*4\r\n$6\r\nCLIENT\r\n$4\r\nKILL\r\n$4\r\nTYPE\r\n$6\r\npubsub\r\n")
        killed[0] = (killed[0][0], sock.recv(64))


def test_subscribers_the_broker_drops_during_a_compiled_cell_are_reconnected(
    tmp_path: Path, module_broker: Any
) -> None:
    # on the Python engine a lost client reconnects; on the core it did not, so the rest of
    # the cell's messages to it were read as the broker's loss
    broker = module_broker("redis")
    path, out = tmp_path / "killed.yaml", tmp_path / "out"
    path.write_text(KILLED.format(port=broker.endpoint.port, pid=broker.pids[0]))
    killed: list[tuple[int, bytes]] = []
    killer = threading.Thread(
        target=kill_subscribers_once_sending, args=(broker.endpoint.port, out, killed)
    )
    killer.start()
    try:
        result = runner.invoke(app, ["run", str(path), "--out", str(out), "--no-analyze"])
    finally:
        killer.join(70)
    assert result.exit_code == 0, result.output
    ((t_kill, reply),) = killed
    assert reply == b":4\r\n"  # the four subscribers were dropped
    (manifest,) = out.glob("*/*/manifest.json")
    (cell,) = json.loads(manifest.read_text())["cells"]
    entry = CellEntry.from_dict(cell)
    assert entry.hot_path is not None and entry.hot_path.engine == "compiled"
    cell_dir = manifest.parent / "cells" / cell["id"]
    events = [json.loads(line) for line in (cell_dir / "events.jsonl").read_text().splitlines()]
    back = [e for e in events if e["kind"] == "client_reconnected"]
    assert sorted(e["role"] for e in back) == ["sub"] * 4
    deliveries = np.fromfile(cell_dir / "deliveries-0.bin", dtype=RECORD_DTYPE)
    after = deliveries[deliveries["t_sent"] > t_kill + 1_000_000_000]
    assert sorted(set(after["sub"].tolist())) == [0, 1, 2, 3]  # every one receives again
    assert entry.generator is not None
    (worker,) = entry.generator.workers
    assert worker.disconnects == worker.reconnects == 4
    summary = analyze_cell_numpy(entry, cell_dir)
    assert summary.lost < 0.05 * summary.expected  # the outage's, not the rest of the cell
    for kind in ("sends", "deliveries"):
        check = check_record_file(cell_dir / f"{kind}-0.bin")
        assert check.closed and not check.truncated, check.describe()
