"""The built-in broker's MQTT 5 wills, topic aliases and shared subscriptions with real
clients (paho-mqtt v2 in MQTTv5 mode, mosquitto_sub/mosquitto_pub -V 5), each test run
against the built-in broker (target ``tbmq-style``, ``python -m mqbench.builtin_broker``) and
against native mosquitto as the reference, both started by the native runtime on 127.0.0.1."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import paho.mqtt.client as paho
import pytest
from conftest import NativeBrokerFactory
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions
from paho_clients import stop_paho

from mqbench.brokers.base import RunningBroker

pytestmark = pytest.mark.integration

BROKERS = ["tbmq-style", "mosquitto"]


@pytest.fixture(scope="module", params=BROKERS)
def broker(request: pytest.FixtureRequest, module_broker: NativeBrokerFactory) -> RunningBroker:
    """The built-in broker or native mosquitto (stopped at the end of the module)."""
    if shutil.which("mosquitto_sub") is None or shutil.which("mosquitto_pub") is None:
        pytest.skip("mosquitto-clients is not installed (apt-get install mosquitto-clients)")
    return module_broker(str(request.param))


def wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


class V5:
    """A paho-mqtt v2 client speaking MQTT 5 on its own network thread."""

    def __init__(
        self,
        broker: RunningBroker,
        client_id: str,
        *,
        clean_start: bool = True,
        session_expiry: int = 0,
    ) -> None:
        self.received: list[tuple[str, bytes, bool, Any]] = []
        self._lock = threading.Lock()
        self._acks = threading.Event()
        self._connected = threading.Event()
        self.reason_codes: list[int] = []
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5
        )
        self.client.on_connect = lambda c, u, f, rc, p: self._connected.set()
        self.client.on_subscribe = self._on_ack
        self.client.on_unsubscribe = self._on_ack
        self.client.on_message = self._on_message
        props = Properties(PacketTypes.CONNECT)
        if session_expiry:
            props.SessionExpiryInterval = session_expiry
        self.client.connect(
            broker.endpoint.host,
            broker.endpoint.port,
            keepalive=30,
            clean_start=clean_start,
            properties=props,
        )
        self.client.loop_start()
        if not self._connected.wait(10):
            self.stop()
            raise AssertionError("paho could not connect")

    def _on_ack(self, client: Any, userdata: Any, mid: int, codes: Any, props: Any) -> None:
        self.reason_codes = [int(code.value) for code in codes]
        self._acks.set()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        with self._lock:
            self.received.append((msg.topic, bytes(msg.payload), bool(msg.retain), msg.properties))

    def subscribe(self, topic: str, qos: int = 1) -> list[int]:
        self._acks.clear()
        self.client.subscribe(topic, options=SubscribeOptions(qos=qos))
        assert self._acks.wait(10), "no SUBACK"
        return self.reason_codes

    def unsubscribe(self, topic: str) -> None:
        self._acks.clear()
        self.client.unsubscribe(topic)
        assert self._acks.wait(10), "no UNSUBACK"

    def payloads(self) -> list[bytes]:
        with self._lock:
            return [payload for _, payload, _, _ in self.received]

    def stop(self) -> None:
        stop_paho(self.client)


class Proc:
    """A mosquitto client process (stdout+stderr read by a thread), always killed at exit."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def output(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def wait_line(self, marker: str, timeout_s: float = 10.0) -> bool:
        """Wait (bounded) until an output line contains ``marker``."""
        return wait_for(lambda: any(marker in line for line in self.output()), timeout_s)

    def finish(self, timeout_s: float = 15.0) -> tuple[int, list[str]]:
        """Wait for exit (bounded); the return code and every output line."""
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._reader.join(5)
        return self.proc.returncode, self.output()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def close(self) -> None:
        """Kill the process if it still runs, then let the reader finish and close the pipe."""
        self.kill()
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def mosquitto(tool: str, broker: RunningBroker, *args: str) -> list[str]:
    # stdbuf: line-buffered stdout, so "received SUBACK" can be waited for through the pipe.
    return [
        "stdbuf",
        "-oL",
        tool,
        "-V",
        "5",
        "-h",
        broker.endpoint.host,
        "-p",
        str(broker.endpoint.port),
        *args,
    ]


@pytest.fixture
def procs() -> Iterator[Callable[[list[str]], Proc]]:
    started: list[Proc] = []

    def start(args: list[str]) -> Proc:
        proc = Proc(args)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()


def vanishing_client(
    procs: Callable[[list[str]], Proc],
    broker: RunningBroker,
    client_id: str,
    topic: str,
    *will_options: str,
) -> Proc:
    """A mosquitto_sub with a will on ``topic``, connected and subscribed (then killable)."""
    proc = procs(
        mosquitto(
            "mosquitto_sub",
            broker,
            "-d",
            "-i",
            client_id,
            "-t",
            f"{topic}/unused",
            "--will-topic",
            topic,
            "--will-payload",
            "bye",
            "-D",
            "will",
            "user-property",
            "why",
            "gone",
            *will_options,
        )
    )
    assert proc.wait_line("received SUBACK"), proc.lines
    return proc


# ----------------------------------------------------------------------------- wills


def test_a_killed_v5_clients_will_reaches_a_strict_v5_subscriber(
    broker: RunningBroker, procs: Callable[[list[str]], Proc]
) -> None:
    watcher = procs(
        mosquitto(
            "mosquitto_sub", broker, "-d", "-t", "will0", "-C", "1", "-W", "15", "-F", "%t|%p|%P"
        )
    )
    assert watcher.wait_line("received SUBACK"), watcher.lines
    doomed = vanishing_client(
        procs, broker, "doomed0", "will0", "-D", "will", "will-delay-interval", "0"
    )
    doomed.kill()  # SIGKILL: the socket closes without DISCONNECT
    code, lines = watcher.finish()
    assert code == 0, lines
    assert "will0|bye|why:gone" in lines


def test_a_delayed_will_is_published_after_its_delay_and_not_before(
    broker: RunningBroker, procs: Callable[[list[str]], Proc]
) -> None:
    watcher = V5(broker, "watcher-delay")
    try:
        watcher.subscribe("will2")
        doomed = vanishing_client(
            procs, broker, "doomed2", "will2", "-x", "60", "-D", "will", "will-delay-interval", "2"
        )
        doomed.kill()
        killed = time.monotonic()
        assert wait_for(lambda: bool(watcher.payloads()), 10.0)
        waited = time.monotonic() - killed
        assert watcher.payloads() == [b"bye"]
        assert 1.5 <= waited <= 6.0, waited
    finally:
        watcher.stop()


def test_a_client_reconnecting_within_the_will_delay_cancels_its_will(
    broker: RunningBroker, procs: Callable[[list[str]], Proc]
) -> None:
    watcher = V5(broker, "watcher-cancel")
    try:
        watcher.subscribe("will3")
        doomed = vanishing_client(
            procs, broker, "doomed3", "will3", "-x", "60", "-D", "will", "will-delay-interval", "2"
        )
        doomed.kill()
        back = V5(broker, "doomed3", clean_start=False, session_expiry=60)
        try:
            time.sleep(3.0)
            assert watcher.payloads() == []
        finally:
            back.stop()
    finally:
        watcher.stop()


# ----------------------------------------------------------------------------- topic aliases


def test_mosquitto_pub_topic_aliases_reach_subscribers_under_the_real_topic(
    broker: RunningBroker, procs: Callable[[list[str]], Proc]
) -> None:
    watcher = V5(broker, "watcher-alias")
    try:
        watcher.subscribe("alias/#")
        pub = procs(
            mosquitto(
                "mosquitto_pub",
                broker,
                "-t",
                "alias/one",
                "-m",
                "hello",
                "-q",
                "1",
                "--repeat",
                "3",
                "-D",
                "publish",
                "topic-alias",
                "3",
            )
        )
        code, lines = pub.finish()
        assert code == 0, lines
        assert wait_for(lambda: len(watcher.received) == 3)
        assert [(t, p) for t, p, _, _ in watcher.received] == [("alias/one", b"hello")] * 3
    finally:
        watcher.stop()


def test_paho_publishes_by_topic_alias_alone_after_setting_it(broker: RunningBroker) -> None:
    watcher = V5(broker, "watcher-paho-alias")
    pub = V5(broker, "paho-alias-pub")
    try:
        watcher.subscribe("palias/#")
        props = Properties(PacketTypes.PUBLISH)
        props.TopicAlias = 2
        pub.client.publish("palias/x", b"first", qos=1, properties=props).wait_for_publish(5)
        pub.client.publish("", b"second", qos=1, properties=props).wait_for_publish(5)
        assert wait_for(lambda: len(watcher.received) == 2)
        assert [(t, p) for t, p, _, _ in watcher.received] == [
            ("palias/x", b"first"),
            ("palias/x", b"second"),
        ]
        for _, _, _, received_props in watcher.received:
            assert not hasattr(received_props, "TopicAlias")
    finally:
        pub.stop()
        watcher.stop()


# ----------------------------------------------------------------------------- shared


def test_a_shared_group_splits_messages_between_members_and_a_plain_subscriber_gets_all(
    broker: RunningBroker,
) -> None:
    members = [V5(broker, f"member-{k}") for k in range(2)]
    plain = V5(broker, "plain-share")
    pub = V5(broker, "share-pub")
    try:
        for member in members:
            assert member.subscribe("$share/grp/shared/t") == [1]
        plain.subscribe("shared/t")
        sent = [b"m%d" % k for k in range(10)]
        for payload in sent:
            pub.client.publish("shared/t", payload, qos=1).wait_for_publish(5)
        assert wait_for(lambda: sum(len(m.payloads()) for m in members) == len(sent))
        assert wait_for(lambda: len(plain.payloads()) == len(sent))
        time.sleep(0.2)
        got = [m.payloads() for m in members]
        assert sorted(got[0] + got[1]) == sorted(sent)  # each message to exactly one member
        assert got[0] and got[1]
        assert plain.payloads() == sent
    finally:
        for client in (*members, plain, pub):
            client.stop()


def test_a_shared_subscription_gets_no_retained_message(
    broker: RunningBroker, procs: Callable[[list[str]], Proc]
) -> None:
    if broker.info.name == "mosquitto":
        pytest.skip(
            "mosquitto 2.0.11 sends retained messages on a new shared subscription; "
            "MQTT 5.0 sends them only for non-shared subscriptions (3.3.1.3)"
        )
    pub = V5(broker, "retain-pub")
    try:
        pub.client.publish("sretain/t", b"kept", qos=1, retain=True).wait_for_publish(5)
        shared = procs(mosquitto("mosquitto_sub", broker, "-t", "$share/g/sretain/t", "-W", "2"))
        plain = procs(mosquitto("mosquitto_sub", broker, "-t", "sretain/t", "-C", "1", "-W", "5"))
        _, shared_lines = shared.finish()
        plain_code, plain_lines = plain.finish()
        assert "kept" not in shared_lines
        assert (plain_code, plain_lines) == (0, ["kept"])
        pub.client.publish("sretain/t", b"", qos=1, retain=True).wait_for_publish(5)
    finally:
        pub.stop()


def test_after_a_member_unsubscribes_the_other_member_gets_every_message(
    broker: RunningBroker,
) -> None:
    leaving = V5(broker, "leaving")
    staying = V5(broker, "staying")
    pub = V5(broker, "unsub-pub")
    try:
        leaving.subscribe("$share/g2/sunsub")
        staying.subscribe("$share/g2/sunsub")
        leaving.unsubscribe("$share/g2/sunsub")
        sent = [b"u%d" % k for k in range(6)]
        for payload in sent:
            pub.client.publish("sunsub", payload, qos=1).wait_for_publish(5)
        assert wait_for(lambda: len(staying.payloads()) == len(sent))
        time.sleep(0.2)
        assert staying.payloads() == sent
        assert leaving.payloads() == []
    finally:
        for client in (leaving, staying, pub):
            client.stop()
