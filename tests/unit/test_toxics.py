"""Toxic validation, shaping logic, the event log and the API routing (no real network)."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from mqbench.errors import MqbenchError, ScenarioError
from mqbench.faults.api import ToxiproxyApi, encode_response, read_request
from mqbench.faults.client import (
    ProxyInfo,
    ToxiproxyClient,
    ToxiproxyUnreachable,
    check_url,
)
from mqbench.faults.tcp import EventLog, ProxyRegistry, split_hostport
from mqbench.faults.toxics import (
    TOXIC_TYPES,
    BandwidthPacer,
    LatencyShaper,
    LimitCounter,
    ToxicError,
    known_toxic_types,
    rolls_affected,
    toxic_from_json,
    validate_toxic,
)

# -- validation ---------------------------------------------------------------------------


def test_known_toxic_types_are_the_five_the_proxy_implements() -> None:
    assert known_toxic_types() == ("bandwidth", "latency", "limit_data", "reset_peer", "timeout")
    assert TOXIC_TYPES["latency"].attribute_names == ("latency", "jitter")
    assert TOXIC_TYPES["reset_peer"].connection_level


def test_a_valid_toxic_is_normalised_with_default_name_and_echoes_only_given_attributes() -> None:
    toxic = validate_toxic("latency", {"latency": 100.0}, stream="upstream", toxicity=1)
    assert toxic.name == "latency_upstream"
    assert toxic.attributes == {"latency": 100}
    assert isinstance(toxic.attributes["latency"], int)
    assert toxic.attr("jitter") == 0
    assert toxic.to_json() == {
        "name": "latency_upstream",
        "type": "latency",
        "stream": "upstream",
        "toxicity": 1.0,
        "attributes": {"latency": 100},
    }


def test_an_unknown_toxic_type_is_rejected_naming_it_and_the_known_types() -> None:
    with pytest.raises(ToxicError, match=r"unknown toxic type 'slow_clse'.*reset_peer"):
        validate_toxic("slow_clse")


def test_an_unknown_attribute_is_rejected_naming_it_and_the_types_attributes() -> None:
    with pytest.raises(ToxicError, match=r"'reset_peer' has no attribute 'latency'.*timeout"):
        validate_toxic("reset_peer", {"latency": 5})


def test_toxic_errors_are_scenario_errors_so_the_cli_shows_one_line() -> None:
    assert issubclass(ToxicError, ScenarioError)


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"rate": -1}, "between 0"),
        ({"rate": 1.5}, "whole number"),
        ({"rate": True}, "whole number"),
        ({"rate": "100"}, "whole number"),
        ({"rate": 2**60}, "between 0"),
    ],
)
def test_bad_attribute_values_are_rejected(attributes: dict[str, Any], message: str) -> None:
    with pytest.raises(ToxicError, match=message):
        validate_toxic("bandwidth", attributes)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stream": "both"}, "stream must be"),
        ({"toxicity": 1.5}, "toxicity"),
        ({"toxicity": -0.1}, "toxicity"),
        ({"toxicity": "1"}, "toxicity"),
        ({"name": "a/b"}, "without '/'"),
    ],
)
def test_bad_stream_toxicity_or_name_is_rejected(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ToxicError, match=message):
        validate_toxic("timeout", {"timeout": 1}, **kwargs)


def test_toxic_json_with_unknown_fields_or_non_object_attributes_is_rejected() -> None:
    with pytest.raises(ToxicError, match="unknown field"):
        toxic_from_json({"type": "latency", "latencyy": 3})
    with pytest.raises(ToxicError, match="attributes must be"):
        toxic_from_json({"type": "latency", "attributes": [1]})
    assert toxic_from_json({"type": "limit_data", "attributes": None}).attributes == {}


# -- shaping logic ------------------------------------------------------------------------


def test_latency_releases_each_chunk_latency_after_its_arrival() -> None:
    shaper = LatencyShaper(100, 0, random.Random(1))
    assert shaper.release_at(10.0) == pytest.approx(10.1)
    assert shaper.release_at(10.5) == pytest.approx(10.6)


def test_latency_jitter_stays_within_bounds_and_never_reorders_chunks() -> None:
    shaper = LatencyShaper(50, 40, random.Random(3))
    releases = [shaper.release_at(i * 0.001) for i in range(2000)]
    assert releases == sorted(releases)
    delays = [r - i * 0.001 for i, r in enumerate(releases)]
    assert min(delays) >= 0.010 - 1e-9
    # a chunk held behind its predecessor still leaves by its own latest bound (50 + 40 ms)
    assert max(delays) <= 0.090 + 1e-9
    # the same draws without the ordering rule would have reordered chunks
    rng = random.Random(3)
    raw = [i * 0.001 + 0.05 + rng.uniform(-0.04, 0.04) for i in range(2000)]
    assert raw != sorted(raw)


def test_bandwidth_pacer_spaces_pieces_at_the_rate_without_banking_idle_time() -> None:
    pacer = BandwidthPacer(100)  # 100 KB/s = 100_000 B/s
    pieces = pacer.pieces(b"x" * 10_000)
    assert [len(p) for p in pieces] == [2000] * 5  # 20 ms worth each
    slots = [pacer.slot(len(p), 0.0) for p in pieces]
    assert slots == pytest.approx([0.0, 0.02, 0.04, 0.06, 0.08])
    # after a long pause the next piece goes at once, and the one after waits again
    assert pacer.slot(2000, 5.0) == 5.0
    assert pacer.slot(2000, 5.0) == pytest.approx(5.02)


def test_bandwidth_rate_zero_means_unlimited() -> None:
    pacer = BandwidthPacer(0)
    assert pacer.unlimited
    assert pacer.pieces(b"abc") == [b"abc"]
    assert pacer.slot(10**9, 1.0) == 1.0


def test_limit_counter_truncates_at_the_limit_and_asks_to_close() -> None:
    counter = LimitCounter(10)
    assert counter.take(b"123456") == (b"123456", False)
    assert counter.take(b"7890abc") == (b"7890", True)
    assert counter.take(b"more") == (b"", True)
    assert LimitCounter(0).take(b"x") == (b"", True)
    assert LimitCounter(3).take(b"abc") == (b"abc", True)


def test_toxicity_is_a_per_connection_probability() -> None:
    rng = random.Random(42)
    assert rolls_affected(1.0, rng) and not rolls_affected(0.0, rng)
    hits = sum(rolls_affected(0.3, rng) for _ in range(10_000))
    assert 2700 < hits < 3300


# -- event log ----------------------------------------------------------------------------


def test_event_log_numbers_events_filters_by_proxy_and_since_and_counts_dropped() -> None:
    log = EventLog(maxlen=3)
    for i in range(5):
        log.record("a" if i % 2 == 0 else "b", "toxic_added", i=i)
    assert log.dropped == 2
    events = log.events()
    assert [e["seq"] for e in events] == [3, 4, 5]
    assert [e["i"] for e in log.events("a")] == [2, 4]
    assert [e["seq"] for e in log.events(since_seq=4)] == [5]
    assert all(isinstance(e["t_ns"], int) and e["t_ns"] > 1_600_000_000 * 10**9 for e in events)


def test_addresses_must_be_host_colon_port() -> None:
    assert split_hostport("127.0.0.1:0") == ("127.0.0.1", 0)
    assert split_hostport("[::1]:80") == ("::1", 80)
    assert split_hostport(":8474") == ("127.0.0.1", 8474)
    for bad in ("localhost", "host:http", "h:70000"):
        with pytest.raises(MqbenchError, match="host:port"):
            split_hostport(bad)


# -- API routing (disabled proxies do not listen, so no sockets are opened) ---------------


def _call(api: ToxiproxyApi, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    raw = b"" if body is None else json.dumps(body).encode()
    return asyncio.run(api.handle(method, path, raw))


def test_api_routes_map_to_toxiproxy_status_codes() -> None:
    api = ToxiproxyApi(ProxyRegistry(seed=1))
    proxy = {"name": "p", "upstream": "127.0.0.1:1", "listen": "127.0.0.1:0", "enabled": False}

    async def scenario() -> list[tuple[int, Any]]:
        out = []
        for method, path, body in [
            ("POST", "/proxies", proxy),
            ("POST", "/proxies", proxy),
            ("GET", "/proxies/p", None),
            ("GET", "/proxies/q", None),
            ("POST", "/proxies/p/toxics", {"type": "latency", "attributes": {"latency": 5}}),
            ("POST", "/proxies/p/toxics", {"type": "latency"}),
            ("POST", "/proxies/p/toxics", {"type": "nope"}),
            ("POST", "/proxies/p/toxics/latency_downstream", {"attributes": {"jitter": 2}}),
            ("GET", "/proxies/p/toxics", None),
            ("DELETE", "/proxies/p/toxics/latency_downstream", None),
            ("DELETE", "/proxies/p/toxics/latency_downstream", None),
            ("PUT", "/proxies/p", None),
            ("GET", "/nothing/here", None),
            ("GET", "/proxies/p/events?since=x", None),
            ("POST", "/reset", None),
            ("DELETE", "/proxies/p", None),
        ]:
            raw = b"" if body is None else json.dumps(body).encode()
            out.append(await api.handle(method, path, raw))
        return out

    results = asyncio.run(scenario())
    codes = [status for status, _ in results]
    assert codes == [201, 409, 200, 404, 200, 409, 400, 200, 200, 204, 404, 405, 404, 400, 204, 204]
    assert results[0][1]["enabled"] is False and results[0][1]["toxics"] == []
    assert results[7][1]["attributes"] == {"latency": 5, "jitter": 2}
    assert results[6][1]["error"].startswith("unknown toxic type 'nope'")
    assert results[6][1]["status"] == 400


def test_api_rejects_bodies_that_are_not_json_or_lack_required_fields() -> None:
    api = ToxiproxyApi(ProxyRegistry())
    assert asyncio.run(api.handle("POST", "/proxies", b"{nope"))[0] == 400
    status, body = _call(api, "POST", "/proxies", {"name": "x"})
    assert status == 400 and "upstream" in body["error"]
    status, body = _call(api, "POST", "/proxies", {"name": "x", "upstream": "nohost"})
    assert status == 400 and "host:port" in body["error"]


def test_http_requests_are_parsed_and_responses_encoded_with_content_length() -> None:
    async def parse(raw: bytes) -> tuple[str, str, bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(raw)
        reader.feed_eof()
        return await read_request(reader)

    req = b"POST /proxies HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    assert asyncio.run(parse(req)) == ("POST", "/proxies", b"{}")
    chunked = b"POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    with pytest.raises(MqbenchError, match="chunked"):
        asyncio.run(parse(chunked))
    response = encode_response(201, {"a": 1})
    assert response.startswith(b"HTTP/1.1 201 Created\r\n")
    assert b"Content-Length: 8\r\n" in response and response.endswith(b'{"a": 1}')
    assert b"Content-Length" not in encode_response(204, None)


# -- client side without a server ---------------------------------------------------------


def test_client_urls_must_be_http_host_port() -> None:
    assert check_url("http://127.0.0.1:8474/") == "http://127.0.0.1:8474"
    for bad in ("127.0.0.1:8474", "https://h:1", "http://h:1/api", "http://h:99999"):
        with pytest.raises(ScenarioError):
            check_url(bad)


def test_client_validates_a_toxic_before_any_request_is_made() -> None:
    client = ToxiproxyClient("http://127.0.0.1:9", timeout_s=0.2)
    with pytest.raises(ToxicError, match="no attribute 'rate'"):
        client.add_toxic("p", "latency", {"rate": 1})


def test_client_reports_a_refused_url_as_unreachable_in_one_line() -> None:
    client = ToxiproxyClient("http://127.0.0.1:9", timeout_s=0.5)  # discard port: closed
    with pytest.raises(ToxiproxyUnreachable, match=r"http://127.0.0.1:9 did not answer") as e:
        client.check()
    assert "\n" not in str(e.value)


def test_proxy_info_parses_api_json_and_keeps_toxics_it_does_not_know() -> None:
    info = ProxyInfo.from_json(
        {
            "name": "p",
            "listen": "0.0.0.0:26379",
            "upstream": "redis:6379",
            "enabled": True,
            "toxics": [
                {
                    "name": "s",
                    "type": "slicer",
                    "stream": "upstream",
                    "toxicity": 1,
                    "attributes": {"average_size": 3},
                },
                {"name": "l", "type": "latency", "attributes": {"latency": 1}},
            ],
        }
    )
    assert info.listen_host == "127.0.0.1" and info.listen_port == 26379
    assert [t.type for t in info.toxics] == ["slicer", "latency"]
