"""Memory device store semantics (those of the Lua scripts) and session delivery with fakes."""

from __future__ import annotations

import time
from typing import Any

import pytest

from mqbench.builtin_broker.config import (
    BrokerConfig,
    ClientClassifier,
    ClientType,
    load_credentials,
)
from mqbench.builtin_broker.message import PUBREL_MARKER, Message, deserialize
from mqbench.builtin_broker.persistence.app_queue import MemoryAppQueue
from mqbench.builtin_broker.persistence.base import (
    Clear,
    Fetch,
    MarkPubrel,
    Op,
    Remove,
    Save,
    allocated_ids,
)
from mqbench.builtin_broker.persistence.memory import MemoryDeviceStore
from mqbench.builtin_broker.persistence.redis_store import collect_results, plan_calls
from mqbench.builtin_broker.session import APP, DEVICE, MEMORY, REL, Outgoing, PendingAck, Session
from mqbench.errors import UsageError
from mqbench.wire.mqtt.properties import PROP_MESSAGE_EXPIRY, PROP_USER_PROPERTY


def _save(store: MemoryDeviceStore, cid: str, values: list[bytes], ttl: int = 0) -> list[int]:
    result: list[int] = store.execute_now([Save(cid, values, [ttl] * len(values))])[0]
    return result


def _fetch(store: MemoryDeviceStore, cid: str) -> list[tuple[int, bytes]]:
    result: list[tuple[int, bytes]] = store.execute_now([Fetch(cid)])[0]
    return result


# ----------------------------------------------------------------------------- store


def test_packet_ids_wrap_from_65535_to_1_and_keep_their_order() -> None:
    store = MemoryDeviceStore(100)
    _save(store, "c", [b"old"])  # packet id 1, acknowledged below
    store.execute_now([Remove("c", [1])])
    store._clients["c"].last_packet_id = 65533
    assert _save(store, "c", [b"a", b"b", b"c"]) == [65534, 65535, 1]
    assert _fetch(store, "c") == [(65534, b"a"), (65535, b"b"), (1, b"c")]


def test_a_packet_id_reused_after_the_wrap_replaces_the_old_message_at_the_end() -> None:
    store = MemoryDeviceStore(100)
    _save(store, "c", [b"old"])
    store._clients["c"].last_packet_id = 65535
    assert _save(store, "c", [b"new"]) == [1]
    assert _fetch(store, "c") == [(1, b"new")]


def test_saving_past_the_limit_drops_the_oldest_messages() -> None:
    store = MemoryDeviceStore(3)
    _save(store, "c", [b"1", b"2", b"3", b"4", b"5"])
    assert _fetch(store, "c") == [(3, b"3"), (4, b"4"), (5, b"5")]


def test_expired_messages_are_dropped_on_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryDeviceStore(10)
    _save(store, "c", [b"short"], ttl=1)
    _save(store, "c", [b"long"], ttl=100)
    later = time.monotonic() + 2
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert _fetch(store, "c") == [(2, b"long")]
    assert store.stored("c") == 1


def test_remove_mark_pubrel_and_clear_change_what_fetch_returns() -> None:
    store = MemoryDeviceStore(10)
    _save(store, "c", [b"a", b"b", b"c"])
    store.execute_now([Remove("c", [1]), MarkPubrel("c", [2])])
    assert _fetch(store, "c") == [(2, PUBREL_MARKER), (3, b"c")]
    store.execute_now([Clear("c")])
    assert _fetch(store, "c") == []
    assert _save(store, "c", [b"x"]) == [1]


def test_messages_limit_above_65535_is_rejected() -> None:
    with pytest.raises(ValueError, match="can't be greater than 65535"):
        MemoryDeviceStore(65536)
    with pytest.raises(UsageError, match="65535"):
        BrokerConfig(messages_limit=70_000).validate()


def test_allocated_ids_wrap_like_the_save_script() -> None:
    assert allocated_ids(65534, 3) == [65535, 1, 2]
    assert allocated_ids(0, 2) == [1, 2]


def test_redis_plan_merges_consecutive_saves_of_a_client_and_splits_their_ids() -> None:
    ops: list[Op] = [
        Save("a", [b"1"], [5]),
        Save("b", [b"2"], [5]),
        Save("a", [b"3", b"4"], [5, 5]),
        Remove("a", [9]),
        Save("a", [b"5"], [5]),
    ]
    calls, parts = plan_calls(ops, 100, merge=True)
    assert [c[0] for c in calls] == ["SAVE", "SAVE", "REMOVE", "SAVE"]
    assert calls[0][1] == ["{a}_messages", "{a}_last_packet_id"]
    assert calls[0][2] == [100, 5, b"1", 5, b"3", 5, b"4"]
    results = collect_results(ops, calls, parts, [10, 0, 1, 13])
    assert results == [[11], [1], [12, 13], 1, [14]]
    unmerged, _ = plan_calls(ops, 100, merge=False)
    assert len(unmerged) == 5


def test_message_round_trips_through_its_stored_form() -> None:
    message = Message.create(
        "t/1", b"payload", 2, True, {PROP_USER_PROPERTY: (("k", "v"),), PROP_MESSAGE_EXPIRY: 60}
    )
    back = deserialize(message.serialize())
    assert back == message
    assert deserialize(PUBREL_MARKER) is None
    with pytest.raises(ValueError, match="corrupt"):
        deserialize(b"P\x01")


def test_memory_app_queue_keeps_entries_in_order_until_acked() -> None:
    queue = MemoryAppQueue(limit=2)
    from mqbench.builtin_broker.persistence.base import Ack, Append, Read

    e1, e2, e3 = queue.execute_now([Append("a", b"1"), Append("a", b"2"), Append("a", b"3")])
    assert queue.execute_now([Read("a")])[0] == [(e2, b"2"), (e3, b"3")]
    queue.execute_now([Ack("a", [e2])])
    assert queue.execute_now([Read("a")])[0] == [(e3, b"3")]
    assert e1 != e2


# ----------------------------------------------------------------------------- classify


def test_client_type_comes_from_patterns_or_an_enforced_credentials_file(tmp_path: Any) -> None:
    by_pattern = ClientClassifier(app_pattern="app-.*")
    assert by_pattern.classify("app-1", None, None) is ClientType.APPLICATION
    assert by_pattern.classify("dev-1", None, None) is ClientType.DEVICE
    device_only = ClientClassifier(device_pattern="dev-.*")
    assert device_only.classify("other", None, None) is ClientType.APPLICATION
    path = tmp_path / "creds.json"
    path.write_text(
        '{"credentials": [{"username": "u", "password": "p", "client_type": "application"},'
        ' {"client_id": "d-.*"}]}'
    )
    creds = ClientClassifier(credentials=load_credentials(path))
    assert creds.classify("x", "u", b"p") is ClientType.APPLICATION
    assert creds.classify("x", "u", b"wrong") is None
    assert creds.classify("d-1", None, None) is ClientType.DEVICE
    path.write_text("[1]")
    with pytest.raises(UsageError, match="credentials"):
        load_credentials(path)


# ----------------------------------------------------------------------------- session


class FakeLink:
    """Records what a session sends."""

    def __init__(self, max_size: int = 0) -> None:
        self.sent: list[tuple[str, int, bool, bytes]] = []
        self.max_size = max_size

    def send_publish(self, out: Outgoing) -> bool:
        assert out.message is not None
        if self.max_size and len(out.message.payload) > self.max_size:
            return False
        self.sent.append(("PUBLISH", out.packet_id, out.dup, out.message.payload))
        return True

    def send_pubrel(self, packet_id: int) -> None:
        self.sent.append(("PUBREL", packet_id, False, b""))


class Harness:
    """A session whose operations run on real memory backends, applied on demand."""

    def __init__(self, mode: str, window: int = 2) -> None:
        self.device = MemoryDeviceStore(100)
        self.app = MemoryAppQueue()
        self.ops: list[tuple[str, Op]] = []
        self.session = Session(
            "c",
            ClientType.DEVICE if mode != APP else ClientType.APPLICATION,
            mode,
            lambda op: self.ops.append(("device", op)),
            lambda op: self.ops.append(("app", op)),
        )
        self.link = FakeLink()
        self.window = window

    def run(self) -> None:
        while self.ops:
            batch, self.ops = self.ops, []
            for where, op in batch:
                backend = self.device if where == "device" else self.app
                (result,) = backend.execute_now([op])
                if op.callback is not None:
                    op.callback(result)

    def offer(self, payload: bytes, qos: int = 1, ack: PendingAck | None = None) -> None:
        self.session.offer(Message.create("t", payload, qos, False), qos, False, (), ack)


def test_memory_session_sends_within_the_window_and_pumps_on_puback() -> None:
    h = Harness(MEMORY)
    h.session.attach(h.link, 2, resume=False)
    for k in range(3):
        h.offer(b"m%d" % k)
    assert [s[1] for s in h.link.sent] == [1, 2]
    h.session.on_puback(1)
    assert [s[3] for s in h.link.sent] == [b"m0", b"m1", b"m2"]
    h.session.on_puback(99)  # unknown ids are ignored
    assert len(h.session.inflight) == 2


def test_device_session_saves_before_sending_and_removes_on_puback() -> None:
    h = Harness(DEVICE)
    h.session.attach(h.link, 10, resume=False)
    released: list[bool] = []
    ack = PendingAck(b"ack", lambda: released.append(True))
    h.offer(b"hello", ack=ack)
    ack.release()
    assert h.link.sent == [] and released == []
    h.run()
    assert released == [True]
    assert h.link.sent == [("PUBLISH", 1, False, b"hello")]
    h.session.on_puback(1)
    h.run()
    assert h.device.stored("c") == 0


def test_device_session_redelivers_unacked_messages_with_dup_after_reconnect() -> None:
    h = Harness(DEVICE)
    h.session.attach(h.link, 10, resume=False)
    h.offer(b"sent-before")
    h.run()
    h.session.detach()
    h.offer(b"while-offline")
    h.run()
    link2 = FakeLink()
    h.session.attach(link2, 10, resume=True)
    h.run()
    assert link2.sent == [
        ("PUBLISH", 1, True, b"sent-before"),
        ("PUBLISH", 2, False, b"while-offline"),
    ]


def test_qos2_delivery_becomes_a_pubrel_marker_and_survives_reconnect_as_pubrel() -> None:
    h = Harness(DEVICE)
    h.session.attach(h.link, 10, resume=False)
    h.offer(b"exactly-once", qos=2)
    h.run()
    h.session.on_pubrec(1)
    h.run()
    assert h.link.sent[-1] == ("PUBREL", 1, False, b"")
    h.session.detach()
    link2 = FakeLink()
    h.session.attach(link2, 10, resume=True)
    h.run()
    assert link2.sent == [("PUBREL", 1, False, b"")]
    assert h.session.inflight[1].state == REL
    h.session.on_pubcomp(1)
    h.run()
    assert h.device.stored("c") == 0


def test_app_session_reads_its_queue_in_order_on_reconnect_and_acks_entries() -> None:
    h = Harness(APP)
    h.offer(b"a")
    h.offer(b"b")
    h.run()
    h.session.attach(h.link, 10, resume=True)
    h.run()
    assert [s[3] for s in h.link.sent] == [b"a", b"b"]
    h.session.on_puback(h.link.sent[0][1])
    h.run()
    h.session.detach()
    link2 = FakeLink()
    h.session.attach(link2, 10, resume=True)
    h.run()
    assert [s[3] for s in link2.sent] == [b"b"]


def test_message_too_large_for_the_client_is_dropped_and_released() -> None:
    h = Harness(DEVICE)
    h.link = FakeLink(max_size=3)
    h.session.attach(h.link, 10, resume=False)
    h.offer(b"too large")
    h.run()
    h.run()
    assert h.link.sent == [] and h.session.dropped == 1
    assert h.device.stored("c") == 0
