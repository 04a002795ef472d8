"""The built-in Toxiproxy-API proxy, driven by toxiproxy-python, against real TCP on loopback.

Upstreams are small threaded servers: an echo server, and a "blast" server that reads an
8-byte count and sends that many bytes. Timing assertions allow the stated 10% and measure
over enough data to be stable on a loaded 2-core machine.
"""

from __future__ import annotations

import contextlib
import os
import socket
import socketserver
import statistics
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from mqbench.faults.api import REQUEST_ID_HEADER
from mqbench.faults.client import ToxiproxyApiError, ToxiproxyClient, ToxiproxyUnreachable
from mqbench.faults.proxy import ProxyServerThread, start_proxy_process

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        with self.request:
            while True:
                try:
                    data = self.request.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                self.request.sendall(data)


class _Blast(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        with self.request:
            head = b""
            while len(head) < 8:
                chunk = self.request.recv(8 - len(head))
                if not chunk:
                    return
                head += chunk
            (count,) = struct.unpack("!Q", head)
            block = b"x" * 16384
            try:
                while count > 0:
                    n = min(count, len(block))
                    self.request.sendall(block[:n])
                    count -= n
            except OSError:
                return


def _serve(handler: type[socketserver.BaseRequestHandler]) -> Iterator[str]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def echo_upstream() -> Iterator[str]:
    yield from _serve(_Echo)


@pytest.fixture
def blast_upstream() -> Iterator[str]:
    yield from _serve(_Blast)


@pytest.fixture
def proxy_server() -> Iterator[ProxyServerThread]:
    """The built-in server in a thread; toxiproxy-python's (global) API address points at it."""
    saved = (APIConsumer.host, APIConsumer.port)
    with ProxyServerThread(seed=7) as server:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        APIConsumer.host, APIConsumer.port = host, int(port)
        try:
            yield server
        finally:
            APIConsumer.host, APIConsumer.port = saved


@pytest.fixture
def tp(proxy_server: ProxyServerThread) -> toxiproxy.Toxiproxy:
    return toxiproxy.Toxiproxy()


def _connect(proxy: Any, timeout: float = 5.0) -> socket.socket:
    port = int(proxy.listen.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def _wait_for(predicate: Any, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


# -- API round trips ----------------------------------------------------------------------


def test_proxies_are_created_listed_fetched_and_deleted_through_toxiproxy_python(
    tp: toxiproxy.Toxiproxy, echo_upstream: str, proxy_server: ProxyServerThread
) -> None:
    assert tp.running()
    assert tp.version() == b'{"version": "2.12.0"}\n'
    proxy = tp.create(upstream=echo_upstream, name="broker")
    assert proxy.name == "broker" and proxy.upstream == echo_upstream and proxy.enabled
    assert proxy.listen.startswith("127.0.0.1:") and not proxy.listen.endswith(":0")
    listed = tp.proxies()
    assert set(listed) == {"broker"} and listed["broker"].listen == proxy.listen
    fetched = requests.get(f"{proxy_server.url}/proxies/broker", timeout=5)
    assert fetched.status_code == 200
    assert fetched.json() == {
        "name": "broker",
        "listen": proxy.listen,
        "upstream": echo_upstream,
        "enabled": True,
        "Logger": {},
        "toxics": [],
    }
    assert tp.destroy(proxy) is True
    assert tp.proxies() == {}
    assert tp.get_proxy("broker") is None


def test_creating_a_taken_name_is_409_and_missing_proxies_and_toxics_are_404(
    tp: toxiproxy.Toxiproxy, echo_upstream: str, proxy_server: ProxyServerThread
) -> None:
    proxy = tp.create(upstream=echo_upstream, name="dup")
    with pytest.raises(ProxyExists):
        APIConsumer.post("/proxies", json={"name": "dup", "upstream": echo_upstream})
    raw = requests.post(
        f"{proxy_server.url}/proxies", json={"name": "dup", "upstream": echo_upstream}, timeout=5
    )
    assert raw.status_code == 409 and raw.json() == {"error": "proxy already exists", "status": 409}
    with pytest.raises(NotFound):
        APIConsumer.get("/proxies/nope")
    with pytest.raises(NotFound):
        proxy.destroy_toxic("not_there")
    with pytest.raises(NotFound):
        APIConsumer.delete("/proxies/nope")
    created = requests.post(
        f"{proxy_server.url}/proxies", json={"name": "other", "upstream": echo_upstream}, timeout=5
    )
    assert created.status_code == 201
    assert requests.delete(f"{proxy_server.url}/proxies/other", timeout=5).status_code == 204


def test_toxics_are_added_listed_and_removed_and_bad_ones_are_rejected(
    tp: toxiproxy.Toxiproxy, echo_upstream: str
) -> None:
    proxy = tp.create(upstream=echo_upstream, name="tox")
    proxy.add_toxic(type="latency", attributes={"latency": 50, "jitter": 5})
    proxy.add_toxic(type="bandwidth", stream="upstream", name="slow", attributes={"rate": 10})
    toxics = proxy.toxics()
    assert set(toxics) == {"latency_downstream", "slow"}
    assert toxics["latency_downstream"].attributes == {"latency": 50, "jitter": 5}
    assert toxics["slow"].stream == "upstream" and toxics["slow"].toxicity == 1.0
    with pytest.raises(ProxyExists):
        proxy.add_toxic(type="latency", attributes={"latency": 1})
    with pytest.raises(InvalidToxic, match="invalid toxic type"):
        proxy.add_toxic(type="slicer_typo")
    with pytest.raises(InvalidToxic, match="latncy"):
        proxy.add_toxic(type="latency", name="x", attributes={"latncy": 1})
    assert proxy.destroy_toxic("slow") is True
    assert set(proxy.toxics()) == {"latency_downstream"}
    assert tp.get_proxy("tox") is not None


def test_reset_enables_every_proxy_and_removes_every_toxic(
    tp: toxiproxy.Toxiproxy, echo_upstream: str
) -> None:
    a = tp.create(upstream=echo_upstream, name="a")
    b = tp.create(upstream=echo_upstream, name="b")
    a.add_toxic(type="timeout", attributes={"timeout": 0})
    b.disable()
    assert tp.proxies()["b"].enabled is False
    assert tp.reset() is True
    proxies = tp.proxies()
    assert proxies["a"].enabled and proxies["b"].enabled
    assert a.toxics() == {} and b.toxics() == {}
    with _connect(b) as sock:
        sock.sendall(b"back")
        assert _recv_exact(sock, 4) == b"back"


# -- data path and toxics -----------------------------------------------------------------


def test_data_flows_through_the_proxy_unchanged_in_both_directions(
    tp: toxiproxy.Toxiproxy, echo_upstream: str
) -> None:
    proxy = tp.create(upstream=echo_upstream, name="flow")
    payload = bytes(range(256)) * 1024  # 256 KiB
    with _connect(proxy) as sock:
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        echoed = _recv_exact(sock, len(payload))
        sender.join(5)
    assert echoed == payload


def test_reset_peer_makes_the_client_see_a_connection_reset_not_a_clean_eof(
    tp: toxiproxy.Toxiproxy, echo_upstream: str
) -> None:
    proxy = tp.create(upstream=echo_upstream, name="rst")
    with _connect(proxy) as live:
        live.sendall(b"ping")
        assert _recv_exact(live, 4) == b"ping"
        proxy.add_toxic(type="reset_peer", attributes={"timeout": 0})
        with pytest.raises(ConnectionResetError):
            live.recv(16)
    # new connections are reset too while the toxic is present (the RST can beat the
    # client's own socket setup, so it may surface while connecting)
    with pytest.raises(ConnectionResetError), _connect(proxy) as fresh:
        fresh.recv(16)
    proxy.destroy_toxic("reset_peer_downstream")
    with _connect(proxy) as healed:
        healed.sendall(b"ok")
        assert _recv_exact(healed, 2) == b"ok"


def test_reset_peer_waits_its_timeout_before_resetting(
    tp: toxiproxy.Toxiproxy, echo_upstream: str
) -> None:
    proxy = tp.create(upstream=echo_upstream, name="rst_later")
    with _connect(proxy) as sock:
        sock.sendall(b"a")
        assert _recv_exact(sock, 1) == b"a"
        start = time.monotonic()
        proxy.add_toxic(type="reset_peer", attributes={"timeout": 300})
        sock.sendall(b"b")
        assert _recv_exact(sock, 1) == b"b"  # still forwarding before the timeout
        with pytest.raises(ConnectionResetError):
            sock.recv(16)
        elapsed = time.monotonic() - start
    assert 0.27 <= elapsed <= 1.0


def test_reset_peer_on_the_upstream_stream_resets_the_server_and_closes_the_client(
    tp: toxiproxy.Toxiproxy, echo_upstream: str, proxy_server: ProxyServerThread
) -> None:
    proxy = tp.create(upstream=echo_upstream, name="rst_up")
    with _connect(proxy) as sock:
        sock.sendall(b"x")
        assert _recv_exact(sock, 1) == b"x"
        proxy.add_toxic(type="reset_peer", stream="upstream", attributes={"timeout": 0})
        assert sock.recv(16) == b""  # clean EOF for the client
    events = ToxiproxyClient(proxy_server.url).events("rst_up")
    resets = [e for e in events if e["event"] == "connection_reset"]
    assert len(resets) == 1 and resets[0]["reset_side"] == "upstream"


def test_a_toxic_with_toxicity_zero_leaves_connections_alone(
    tp: toxiproxy.Toxiproxy, echo_upstream: str
) -> None:
    proxy = tp.create(upstream=echo_upstream, name="mild")
    proxy.add_toxic(type="reset_peer", toxicity=0.0, attributes={"timeout": 0})
    with _connect(proxy) as sock:
        for _ in range(3):
            sock.sendall(b"still")
            assert _recv_exact(sock, 5) == b"still"


def test_timeout_toxic_stops_data_then_closes_the_connection_after_its_timeout(
    tp: toxiproxy.Toxiproxy, echo_upstream: str
) -> None:
    proxy = tp.create(upstream=echo_upstream, name="to")
    with _connect(proxy) as sock:
        sock.sendall(b"1")
        assert _recv_exact(sock, 1) == b"1"
        start = time.monotonic()
        proxy.add_toxic(type="timeout", attributes={"timeout": 400})
        sock.sendall(b"dropped")
        sock.settimeout(3.0)
        data = sock.recv(16)  # nothing arrives; the proxy closes at ~400 ms
        elapsed = time.monotonic() - start
    assert data == b""
    assert 0.36 <= elapsed <= 1.5


def test_timeout_zero_holds_the_connection_and_drops_data_until_removed(
    tp: toxiproxy.Toxiproxy, echo_upstream: str
) -> None:
    proxy = tp.create(upstream=echo_upstream, name="hold")
    with _connect(proxy) as sock:
        proxy.add_toxic(type="timeout", attributes={"timeout": 0})
        sock.sendall(b"lost")
        sock.settimeout(0.6)
        with pytest.raises(TimeoutError):
            sock.recv(16)  # neither data nor a close
        proxy.destroy_toxic("timeout_downstream")
        sock.settimeout(5.0)
        sock.sendall(b"back")
        assert _recv_exact(sock, 4) == b"back"


def test_latency_adds_100_ms_to_each_round_trip_within_10_percent(
    tp: toxiproxy.Toxiproxy, echo_upstream: str
) -> None:
    proxy = tp.create(upstream=echo_upstream, name="lat")
    with _connect(proxy) as sock:
        base = []
        for _ in range(5):
            t0 = time.perf_counter()
            sock.sendall(b"p")
            _recv_exact(sock, 1)
            base.append(time.perf_counter() - t0)
        proxy.add_toxic(type="latency", attributes={"latency": 100})
        rtts = []
        for _ in range(12):
            t0 = time.perf_counter()
            sock.sendall(b"p")
            assert _recv_exact(sock, 1) == b"p"
            rtts.append(time.perf_counter() - t0)
    added_ms = (statistics.median(rtts) - statistics.median(base)) * 1000
    assert 90.0 <= added_ms <= 110.0, (added_ms, rtts)
    assert min(rtts) >= 0.099


def test_latency_with_jitter_keeps_byte_order(tp: toxiproxy.Toxiproxy, echo_upstream: str) -> None:
    proxy = tp.create(upstream=echo_upstream, name="jit")
    proxy.add_toxic(type="latency", stream="upstream", attributes={"latency": 60, "jitter": 50})
    payload = b"".join(struct.pack("!I", i) for i in range(200))
    with _connect(proxy) as sock:
        for i in range(0, len(payload), 4):  # 200 separate chunks, 2 ms apart
            sock.sendall(payload[i : i + 4])
            time.sleep(0.002)
        echoed = _recv_exact(sock, len(payload))
    assert echoed == payload


def test_bandwidth_limits_a_500_kb_transfer_to_100_kb_per_s_within_10_percent(
    tp: toxiproxy.Toxiproxy, blast_upstream: str
) -> None:
    proxy = tp.create(upstream=blast_upstream, name="bw")
    proxy.add_toxic(type="bandwidth", attributes={"rate": 100})
    total = 500_000
    with _connect(proxy, timeout=15) as sock:
        sock.sendall(struct.pack("!Q", total))
        first = sock.recv(65536)
        t_first = time.perf_counter()
        got = len(first)
        while got < total:
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += len(chunk)
        elapsed = time.perf_counter() - t_first
    assert got == total
    rate_kbps = (total - len(first)) / elapsed / 1000
    assert 90.0 <= rate_kbps <= 110.0, rate_kbps


def test_limit_data_closes_the_connection_after_exactly_n_bytes(
    tp: toxiproxy.Toxiproxy, blast_upstream: str
) -> None:
    proxy = tp.create(upstream=blast_upstream, name="lim")
    proxy.add_toxic(type="limit_data", attributes={"bytes": 10_000})
    with _connect(proxy) as sock:
        sock.sendall(struct.pack("!Q", 100_000))
        received = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    assert len(received) == 10_000


def test_a_disabled_proxy_refuses_new_connections_and_drops_live_ones(
    tp: toxiproxy.Toxiproxy, echo_upstream: str
) -> None:
    proxy = tp.create(upstream=echo_upstream, name="off")
    live = _connect(proxy)
    live.sendall(b"hi")
    assert _recv_exact(live, 2) == b"hi"
    with proxy.down():
        live.settimeout(3.0)
        with contextlib.suppress(ConnectionResetError):
            assert live.recv(16) == b""
        live.close()
        with pytest.raises(ConnectionRefusedError):
            _connect(proxy, timeout=2.0)
    with _connect(proxy) as again:  # same port after enable
        again.sendall(b"on")
        assert _recv_exact(again, 2) == b"on"


# -- event log, client, process -----------------------------------------------------------


def test_event_log_records_toxic_changes_and_resets_with_wall_clock_timestamps(
    tp: toxiproxy.Toxiproxy, echo_upstream: str, proxy_server: ProxyServerThread
) -> None:
    before = time.time_ns()
    proxy = tp.create(upstream=echo_upstream, name="log")
    sock = _connect(proxy)
    sock.sendall(b"x")
    _recv_exact(sock, 1)
    client_addr = f"127.0.0.1:{sock.getsockname()[1]}"
    t_add = time.time_ns()
    proxy.add_toxic(type="reset_peer", name="cut", attributes={"timeout": 0})
    with pytest.raises(ConnectionResetError):
        sock.recv(4)
    sock.close()
    proxy.destroy_toxic("cut")
    t_removed = time.time_ns()
    events = ToxiproxyClient(proxy_server.url).events("log")
    kinds = [e["event"] for e in events]
    assert kinds == [
        "proxy_created",
        "connection_opened",
        "toxic_added",
        "connection_reset",
        "toxic_removed",
    ]
    stamps = [e["t_ns"] for e in events]
    assert stamps == sorted(stamps) and before <= stamps[0] and stamps[-1] <= t_removed
    added, reset = events[2], events[3]
    assert added["toxic"] == "cut" and added["type"] == "reset_peer"
    assert added["clients"] == [client_addr] and t_add <= added["t_ns"]
    assert reset["client"] == client_addr and reset["reason"] == "reset_peer"
    assert reset["toxic"] == "cut" and reset["reset_side"] == "client"
    later = ToxiproxyClient(proxy_server.url).events("log", since=events[2]["seq"])
    assert [e["event"] for e in later] == ["connection_reset", "toxic_removed"]


def test_client_reports_api_errors_and_an_unreachable_url_within_its_timeout(
    proxy_server: ProxyServerThread, echo_upstream: str
) -> None:
    client = ToxiproxyClient(proxy_server.url, timeout_s=2.0)
    info = client.create_proxy("c", echo_upstream)
    assert info.listen_host == "127.0.0.1" and info.listen_port > 0
    client.add_toxic("c", "latency", {"latency": 5})
    assert [t.name for t in client.toxics("c")] == ["latency_downstream"]
    with pytest.raises(ToxiproxyApiError, match="409") as conflict:
        client.create_proxy("c", echo_upstream)
    assert conflict.value.status == 409
    client.remove_toxic("c", "latency_downstream")
    client.remove_toxic("c", "latency_downstream", missing_ok=True)
    client.delete_proxy("c")
    client.delete_proxy("c", missing_ok=True)
    # a port that accepts but never answers: bounded by the timeout
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    try:
        slow = ToxiproxyClient(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_s=0.5)
        start = time.monotonic()
        with pytest.raises(ToxiproxyUnreachable, match=r"did not answer within 0\.5 s"):
            slow.check()
        assert time.monotonic() - start < 3.0
    finally:
        silent.close()
    with pytest.raises(ToxiproxyUnreachable) as exc_info:
        ToxiproxyClient(f"http://127.0.0.1:{_closed_port()}", timeout_s=1.0).check()
    assert "\n" not in str(exc_info.value)


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    sock.close()
    return port


def test_proxy_module_runs_as_a_process_that_serves_the_api_and_stops_on_sigterm(
    echo_upstream: str,
) -> None:
    process = start_proxy_process(api_port=0, seed=1)
    try:
        client = ToxiproxyClient(process.url, timeout_s=3.0)
        assert client.check() == "2.12.0" and client.is_builtin()
        info = client.create_proxy("p", echo_upstream)
        with socket.create_connection(("127.0.0.1", info.listen_port), timeout=5) as sock:
            sock.sendall(b"uv")
            assert _recv_exact(sock, 2) == b"uv"
            client.add_toxic("p", "reset_peer", {"timeout": 0})
            with pytest.raises(ConnectionResetError):  # RST on uvloop too
                sock.recv(4)
        assert _wait_for(lambda: client.connections("p") == [])
    finally:
        code = process.stop()
    assert code == 0


# -- Toxiproxy 2.12.0 behaviour, measured on real sockets ----------------------------------
#
# These run against the built-in proxy and against the real Toxiproxy 2.12.0, so the same
# assertions show that both behave alike. `scripts/install.sh --dev` (the test command)
# builds toxiproxy-server from the Go module proxy into ~/.cache/mqbench (scripts/
# build_toxiproxy.sh); MQBENCH_TOXIPROXY_SERVER names another binary.

TOXIPROXY_BIN_ENV = "MQBENCH_TOXIPROXY_SERVER"
TOXIPROXY_BUILT = Path.home() / ".cache" / "mqbench" / "toxiproxy-2.12.0" / "toxiproxy-server"


def _toxiproxy_binary() -> str | None:
    named = os.environ.get(TOXIPROXY_BIN_ENV)
    if named:
        return named
    return str(TOXIPROXY_BUILT) if TOXIPROXY_BUILT.exists() else None


class Api:
    """Raw HTTP to one Toxiproxy-API server (no client library in between)."""

    def __init__(self, url: str, *, builtin: bool) -> None:
        self.url = url
        self.builtin = builtin
        self.http = requests.Session()
        self.http.trust_env = False  # loopback only, never an HTTP proxy

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.http.get(self.url + path, timeout=5, **kwargs)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> requests.Response:
        return self.http.post(self.url + path, json=body, timeout=5, **kwargs)

    def delete(self, path: str) -> requests.Response:
        return self.http.delete(self.url + path, timeout=5)

    def proxy(self, name: str, upstream: str) -> int:
        """Create proxy ``name`` on a free loopback port; return the port."""
        created = self.post("/proxies", {"name": name, "upstream": upstream, "listen": _free()})
        assert created.status_code == 201, created.text
        return int(created.json()["listen"].rsplit(":", 1)[1])

    def toxic(self, proxy: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.post(f"/proxies/{proxy}/toxics", body)
        assert response.status_code == 200, response.text
        return dict(response.json())


def _free() -> str:
    return f"127.0.0.1:{_closed_port()}"


@contextlib.contextmanager
def _real_toxiproxy(binary: str) -> Iterator[str]:
    port = _closed_port()
    process = subprocess.Popen(
        [binary, "-host", "127.0.0.1", "-port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert _wait_for(lambda: _answers(url), timeout=10.0), "toxiproxy-server did not start"
        yield url
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _answers(url: str) -> bool:
    try:
        return requests.get(url + "/version", timeout=0.5).status_code == 200
    except requests.RequestException:
        return False


@pytest.fixture(params=["builtin", "toxiproxy-2.12.0"])
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    if request.param == "builtin":
        with ProxyServerThread(seed=11) as server:
            yield Api(server.url, builtin=True)
        return
    binary = _toxiproxy_binary()
    if binary is None:
        pytest.skip(
            f"no toxiproxy-server 2.12.0 at {TOXIPROXY_BUILT} (scripts/build_toxiproxy.sh "
            f"needs Go) and {TOXIPROXY_BIN_ENV} is not set"
        )
    with _real_toxiproxy(binary) as url:
        yield Api(url, builtin=False)


def _round_trips(port: int, count: int) -> list[float]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        out = []
        for _ in range(count):
            t0 = time.perf_counter()
            sock.sendall(b"p")
            assert _recv_exact(sock, 1) == b"p"
            out.append(time.perf_counter() - t0)
        return out


def test_two_100_ms_latency_toxics_on_one_stream_add_up_to_200_ms(
    api: Api, echo_upstream: str
) -> None:
    port = api.proxy("chain", echo_upstream)
    api.toxic("chain", {"type": "latency", "name": "a", "attributes": {"latency": 100}})
    one = statistics.median(_round_trips(port, 4))
    api.toxic("chain", {"type": "latency", "name": "b", "attributes": {"latency": 100}})
    two = _round_trips(port, 6)
    assert 0.095 <= one < 0.16, one
    assert min(two) >= 0.195, two
    assert statistics.median(two) < 0.26, two
    # and one on the other stream adds its own 50 ms to the round trip
    api.toxic("chain", {"type": "latency", "stream": "upstream", "attributes": {"latency": 50}})
    three = _round_trips(port, 4)
    assert min(three) >= 0.245 and statistics.median(three) < 0.31, three


def test_a_burst_through_two_latency_toxics_leaves_as_toxiproxys_timestamps_dictate(
    api: Api, echo_upstream: str
) -> None:
    """Toxiproxy advances a chunk's stamp by each stage's sleep, not to when it left.

    A chunk queued behind others in the first stage has waited part of the second stage's
    delay already: only a lone chunk gets 100 + 100 ms. Sent 5 ms apart, 20 one-byte
    chunks arrive from ~200 ms on, the last ~105 ms after it was sent (not ~200 ms).
    """
    port = api.proxy("burst", echo_upstream)
    for name in ("a", "b"):
        api.toxic("burst", {"type": "latency", "name": name, "attributes": {"latency": 100}})
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter()
        sent_at = []
        for i in range(20):
            sent_at.append(time.perf_counter() - t0)
            sock.sendall(bytes([i]))
            time.sleep(0.005)
        got = b""
        first_at = None
        while len(got) < 20:
            chunk = sock.recv(64)
            assert chunk
            if first_at is None:
                first_at = time.perf_counter() - t0
            got += chunk
        last_at = time.perf_counter() - t0
    assert got == bytes(range(20))
    assert first_at is not None and first_at >= 0.195
    assert last_at - sent_at[-1] < 0.16, (first_at, last_at, sent_at[-1])


def test_slow_close_delays_the_close_by_its_delay_and_two_add_up(
    api: Api, blast_upstream: str
) -> None:
    port = api.proxy("slow", blast_upstream)

    def close_after_data() -> float:
        """Seconds from the last byte to the EOF of a 4-byte answer the server then closes."""
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(struct.pack("!Q", 4))
            assert _recv_exact(sock, 4) == b"xxxx"
            t_data = time.perf_counter()
            assert sock.recv(16) == b""
            return time.perf_counter() - t_data

    assert close_after_data() < 0.1
    created = api.toxic("slow", {"type": "slow_close", "attributes": {"delay": 300}})
    assert created["attributes"] == {"delay": 300}
    assert 0.29 <= close_after_data() < 0.45
    api.toxic("slow", {"type": "slow_close", "name": "more", "attributes": {"delay": 200}})
    assert 0.49 <= close_after_data() < 0.7


def test_a_noop_toxic_passes_data_unchanged_without_delay(api: Api, echo_upstream: str) -> None:
    port = api.proxy("noop", echo_upstream)
    for stream in ("upstream", "downstream"):
        created = api.toxic("noop", {"type": "noop", "stream": stream})
        assert created == {
            "attributes": {},
            "name": f"noop_{stream}",
            "type": "noop",
            "stream": stream,
            "toxicity": 1,
        }
    payload = bytes(range(256)) * 256
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        assert _recv_exact(sock, len(payload)) == payload
        sender.join(5)
    assert statistics.median(_round_trips(port, 5)) < 0.05


def test_removing_a_latency_toxic_releases_the_data_it_holds_at_once(
    api: Api, echo_upstream: str
) -> None:
    port = api.proxy("release", echo_upstream)
    api.toxic("release", {"type": "latency", "attributes": {"latency": 5000}})
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        t0 = time.perf_counter()
        sock.sendall(b"held")
        time.sleep(0.2)
        assert api.delete("/proxies/release/toxics/latency_downstream").status_code == 204
        assert _recv_exact(sock, 4) == b"held"
        assert time.perf_counter() - t0 < 1.0


def test_toxic_creation_answers_every_attribute_with_its_default(api: Api) -> None:
    assert api.post("/proxies", {"name": "t", "upstream": "127.0.0.1:9", "listen": _free()})
    answers = {
        kind: api.post("/proxies/t/toxics", {"type": kind, "name": kind})
        for kind in ("latency", "bandwidth", "slow_close", "timeout", "reset_peer", "limit_data")
    }
    attributes = {kind: r.json()["attributes"] for kind, r in answers.items()}
    assert attributes == {
        "latency": {"latency": 0, "jitter": 0},
        "bandwidth": {"rate": 0},
        "slow_close": {"delay": 0},
        "timeout": {"timeout": 0},
        "reset_peer": {"timeout": 0},
        "limit_data": {"bytes": 0},
    }
    assert answers["latency"].content == (
        b'{"attributes":{"latency":0,"jitter":0},"name":"latency","type":"latency",'
        b'"stream":"downstream","toxicity":1}'
    )
    assert api.get("/proxies/t/toxics/latency").content == answers["latency"].content


def test_version_answers_as_toxiproxy_2_12_0(api: Api) -> None:
    response = api.get("/version")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json;charset=utf-8"
    assert response.content == b'{"version": "2.12.0"}\n'
    assert ToxiproxyClient(api.url).version() == "2.12.0"
    assert ToxiproxyClient(api.url).is_builtin() is api.builtin


def test_every_routed_answer_has_a_new_request_id_and_unknown_paths_have_none(api: Api) -> None:
    first = api.get("/version", headers={"X-Toxiproxy-Request-Id": "mine"})
    second = api.get("/proxies/nope")
    ids = [r.headers[REQUEST_ID_HEADER] for r in (first, second)]
    assert ids[0] != ids[1] and "mine" not in ids
    assert all(len(i) == 20 and set(i) <= set("0123456789abcdefghijklmnopqrstuv") for i in ids)
    unknown = api.get("/no/such/path")
    assert unknown.status_code == 404 and unknown.content == b"404 page not found\n"
    assert REQUEST_ID_HEADER not in unknown.headers


def test_browser_requests_are_refused_with_403_and_change_nothing(api: Api) -> None:
    browser = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Firefox/120.0"}
    body = {"name": "evil", "upstream": "127.0.0.1:9", "listen": _free()}
    refused = api.post("/proxies", body, headers=browser)
    assert refused.status_code == 403 and refused.content == b"User agent not allowed\n"
    assert refused.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert REQUEST_ID_HEADER in refused.headers
    assert api.get("/proxies").json() == {}
    # only the User-Agent counts: an Origin header from a page is not refused
    assert api.get("/version", headers={"Origin": "http://evil.example"}).status_code == 200


def test_populate_keeps_an_identical_proxy_its_toxics_and_its_connections(
    api: Api, echo_upstream: str
) -> None:
    listen = _free()
    entry = {"name": "kept", "upstream": echo_upstream, "listen": listen}
    assert api.post("/populate", [entry]).status_code == 201
    port = int(listen.rsplit(":", 1)[1])
    api.toxic("kept", {"type": "latency", "attributes": {"latency": 50}})
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"1")
        assert _recv_exact(sock, 1) == b"1"
        again = api.post("/populate", [entry, {**entry, "name": "new", "listen": _free()}])
        assert again.status_code == 201
        kept, new = again.json()["proxies"]
        assert [t["name"] for t in kept["toxics"]] == ["latency_downstream"]
        assert kept["listen"] == listen and new["toxics"] == []
        t0 = time.perf_counter()
        sock.sendall(b"2")  # the same connection, still through the latency toxic
        assert _recv_exact(sock, 1) == b"2"
        assert time.perf_counter() - t0 >= 0.045
        changed = api.post("/populate", [{**entry, "upstream": f"127.0.0.1:{_closed_port()}"}])
        assert changed.status_code == 201 and changed.json()["proxies"][0]["toxics"] == []
        sock.settimeout(3)
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(16) == b""  # the replaced proxy closed its connections


def test_populate_with_an_invalid_entry_creates_nothing(api: Api, echo_upstream: str) -> None:
    good = {"name": "good", "upstream": echo_upstream, "listen": _free()}
    response = api.post("/populate", [good, {"upstream": echo_upstream, "listen": _free()}])
    assert response.status_code == 400
    assert response.headers["Content-Type"] == "application/json"
    assert response.json() == {
        "error": "missing required field: name at proxy 2",
        "status": 400,
        "proxies": None,
    }
    assert api.get("/proxies").json() == {}
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(good["listen"].rsplit(":", 1)[1])), 1).close()
    empty = api.post("/populate", [])
    assert empty.status_code == 201 and empty.content == b'{"proxies":null}'


def test_populate_that_cannot_listen_answers_500_with_the_proxies_done_before(
    api: Api, echo_upstream: str
) -> None:
    taken = _free()
    first = {"name": "first", "upstream": echo_upstream, "listen": taken}
    clash = {"name": "clash", "upstream": echo_upstream, "listen": taken}
    response = api.post("/populate", [first, clash])
    assert response.status_code == 500
    body = response.json()
    assert list(body) == ["error", "status", "proxies"] and body["status"] == 500
    assert [p["name"] for p in body["proxies"]] == ["first"]
    assert set(api.get("/proxies").json()) == {"first"}
