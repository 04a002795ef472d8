"""Toxic validation, shaping logic, the event log and the API routing (no real network)."""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

import pytest

from mqbench.errors import MqbenchError, ScenarioError
from mqbench.faults.api import (
    REQUEST_ID_HEADER,
    ApiResponse,
    RequestIds,
    ToxiproxyApi,
    go_json,
)
from mqbench.faults.api_server import encode_response, read_request
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
    LatencyDraw,
    LimitCounter,
    ToxicError,
    go_float32,
    known_toxic_types,
    latency_step,
    rolls_affected,
    toxic_from_json,
    validate_toxic,
)

# -- validation ---------------------------------------------------------------------------


def test_known_toxic_types_are_the_seven_the_proxy_implements() -> None:
    assert known_toxic_types() == (
        "bandwidth",
        "latency",
        "limit_data",
        "noop",
        "reset_peer",
        "slow_close",
        "timeout",
    )
    assert TOXIC_TYPES["latency"].attribute_names == ("latency", "jitter")
    assert TOXIC_TYPES["slow_close"].attribute_names == ("delay",)
    assert TOXIC_TYPES["noop"].attribute_names == ()
    assert TOXIC_TYPES["reset_peer"].connection_level


def test_a_valid_toxic_has_every_attribute_filled_in_and_toxiproxys_json_order() -> None:
    toxic = validate_toxic("latency", {"latency": 100.0}, stream="upstream", toxicity=1)
    assert toxic.name == "latency_upstream"
    assert toxic.attributes == {"latency": 100, "jitter": 0}
    assert isinstance(toxic.attributes["latency"], int)
    assert toxic.to_json() == {
        "attributes": {"latency": 100, "jitter": 0},
        "name": "latency_upstream",
        "type": "latency",
        "stream": "upstream",
        "toxicity": 1,
    }
    assert list(toxic.to_json()) == ["attributes", "name", "type", "stream", "toxicity"]
    assert validate_toxic("noop").to_json()["attributes"] == {}
    assert validate_toxic("slow_close").attributes == {"delay": 0}


def test_toxicity_is_written_as_go_writes_a_float32() -> None:
    assert json.dumps(go_float32(1.0)) == "1"
    assert json.dumps(go_float32(0.0)) == "0"
    assert json.dumps(go_float32(0.1)) == "0.1"
    assert json.dumps(go_float32(0.25)) == "0.25"
    assert json.dumps(go_float32(1 / 3)) == "0.33333334"


def test_an_unknown_toxic_type_is_rejected_naming_it_and_the_known_types() -> None:
    with pytest.raises(ToxicError, match=r"unknown toxic type 'slow_clse'.*reset_peer") as exc:
        validate_toxic("slow_clse")
    assert exc.value.problem == "type"


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
    assert toxic_from_json({"type": "limit_data", "attributes": None}).attributes == {"bytes": 0}


# -- shaping logic ------------------------------------------------------------------------


def test_a_latency_stage_sleeps_what_is_left_of_the_delay_and_advances_the_stamp() -> None:
    # a chunk read at 10.0 reaching the stage at 10.02: 100 ms - 20 ms already waited
    sleep, stamp = latency_step(0.1, 10.0, 10.02)
    assert sleep == pytest.approx(0.08) and stamp == pytest.approx(10.08)


def test_a_lone_chunk_through_two_latency_stages_is_delayed_by_their_sum() -> None:
    now = 0.0
    stamp = 0.0
    for delay in (0.1, 0.1):
        sleep, stamp = latency_step(delay, stamp, now)
        now += max(sleep, 0.0)
    assert now == pytest.approx(0.2)


def test_a_chunk_that_waited_longer_than_the_delay_is_not_slept_and_its_stamp_goes_back() -> None:
    # Toxiproxy adds the (negative) sleep to the stamp: the extra wait is credited downstream
    sleep, stamp = latency_step(0.1, 0.0, 0.15)
    assert sleep == pytest.approx(-0.05) and stamp == pytest.approx(-0.05)


def test_latency_jitter_is_drawn_in_whole_ms_from_minus_jitter_to_just_below_plus_jitter() -> None:
    draw = LatencyDraw(50, 5, random.Random(3))
    delays = {round(draw.delay_s() * 1000) for _ in range(2000)}
    assert delays == set(range(45, 55))  # Toxiproxy: latency + Int63n(2*jitter) - jitter
    assert LatencyDraw(100, 0, random.Random(1)).delay_s() == 0.1


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


def _call(
    api: ToxiproxyApi,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> ApiResponse:
    raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    return asyncio.run(api.handle(method, path, raw, headers))


def _calls(api: ToxiproxyApi, requests: list[tuple[str, str, Any]]) -> list[ApiResponse]:
    """Several requests in one event loop (the registry's proxies live in it)."""

    async def run() -> list[ApiResponse]:
        out = []
        for method, path, body in requests:
            raw = b"" if body is None else json.dumps(body).encode()
            out.append(await api.handle(method, path, raw))
        return out

    return asyncio.run(run())


def _disabled(name: str, port: int = 7001, upstream: str = "127.0.0.1:1") -> dict[str, Any]:
    # disabled proxies do not listen, so these tests open no sockets
    return {"name": name, "upstream": upstream, "listen": f"127.0.0.1:{port}", "enabled": False}


def test_api_routes_map_to_toxiproxy_status_codes() -> None:
    api = ToxiproxyApi(ProxyRegistry(seed=1))
    results = _calls(
        api,
        [
            ("POST", "/proxies", _disabled("p")),
            ("POST", "/proxies", _disabled("p")),
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
        ],
    )
    codes = [r.status for r in results]
    assert codes == [201, 409, 200, 404, 200, 409, 400, 200, 200, 204, 404, 405, 404, 400, 204, 204]
    assert results[0].json()["enabled"] is False and results[0].json()["toxics"] == []
    assert results[1].body == b'{"error":"proxy already exists","status":409}\n'
    assert results[3].body == b'{"error":"proxy not found","status":404}\n'
    assert results[5].json() == {"error": "toxic already exists", "status": 409}
    assert results[6].json() == {"error": "invalid toxic type", "status": 400}
    assert results[7].json()["attributes"] == {"latency": 5, "jitter": 2}
    assert results[10].json() == {"error": "toxic not found", "status": 404}


def test_errors_are_sent_as_go_http_error_sends_them_and_unknown_paths_as_plain_404() -> None:
    api = ToxiproxyApi(ProxyRegistry())
    missing = _call(api, "GET", "/proxies/nope")
    assert missing.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert missing.headers["X-Content-Type-Options"] == "nosniff"
    assert missing.body.endswith(b"\n")
    unknown = _call(api, "GET", "/proxies/")
    assert unknown.status == 404 and unknown.body == b"404 page not found\n"
    assert REQUEST_ID_HEADER not in unknown.headers  # no route matched, no middleware
    wrong_method = _call(api, "DELETE", "/version")
    assert wrong_method.status == 405 and wrong_method.body == b""
    assert REQUEST_ID_HEADER not in wrong_method.headers


def test_version_answers_toxiproxy_2_12_0s_json_line() -> None:
    response = _call(ToxiproxyApi(ProxyRegistry()), "GET", "/version")
    assert response.status == 200
    assert response.headers["Content-Type"] == "application/json;charset=utf-8"
    assert response.body == b'{"version": "2.12.0"}\n'


def test_every_routed_answer_carries_a_fresh_xid_request_id_never_the_clients() -> None:
    api = ToxiproxyApi(ProxyRegistry())
    sent = {"x-toxiproxy-request-id": "mine"}
    ids = [
        _call(api, "GET", "/version", headers=sent).headers[REQUEST_ID_HEADER] for _ in range(50)
    ]
    ids.append(_call(api, "GET", "/proxies/nope").headers[REQUEST_ID_HEADER])
    assert len(set(ids)) == len(ids) and "mine" not in ids
    assert all(len(i) == 20 and set(i) <= set("0123456789abcdefghijklmnopqrstuv") for i in ids)


def test_request_ids_are_xids_that_start_with_the_time_in_seconds() -> None:
    ident = RequestIds().new()
    bits = int("".join(f"{'0123456789abcdefghijklmnopqrstuv'.index(c):05b}" for c in ident), 2)
    seconds = bits >> (100 - 32)
    assert abs(seconds - time.time()) < 5


def test_requests_from_browsers_are_refused_and_change_nothing() -> None:
    api = ToxiproxyApi(ProxyRegistry())
    browser = {"user-agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0"}
    refused = _call(api, "POST", "/proxies", _disabled("p"), headers=browser)
    assert refused.status == 403 and refused.body == b"User agent not allowed\n"
    assert refused.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert REQUEST_ID_HEADER in refused.headers
    assert api.registry.proxies == {}
    # Toxiproxy looks only at the User-Agent: an Origin header alone is served
    origin = {"origin": "http://evil.example", "user-agent": "curl/8"}
    assert _call(api, "GET", "/version", headers=origin).status == 200
    assert _call(api, "GET", "/nope", headers=browser).status == 404  # no route, no check


def test_created_toxics_answer_with_every_attribute_at_its_default() -> None:
    api = ToxiproxyApi(ProxyRegistry())
    results = _calls(
        api,
        [
            ("POST", "/proxies", _disabled("p")),
            ("POST", "/proxies/p/toxics", {"type": "latency", "attributes": {"latency": 100}}),
            ("POST", "/proxies/p/toxics", {"type": "slow_close", "stream": "upstream"}),
            ("POST", "/proxies/p/toxics", {"type": "noop", "toxicity": 0.5}),
            ("GET", "/proxies/p/toxics", None),
        ],
    )
    assert results[1].body == (
        b'{"attributes":{"latency":100,"jitter":0},"name":"latency_downstream",'
        b'"type":"latency","stream":"downstream","toxicity":1}'
    )
    assert results[2].json()["attributes"] == {"delay": 0}
    assert results[3].json() == {
        "attributes": {},
        "name": "noop_downstream",
        "type": "noop",
        "stream": "downstream",
        "toxicity": 0.5,
    }
    # listed as Toxiproxy lists them: the upstream chain first
    names = [t["name"] for t in results[4].json()]
    assert names == ["slow_close_upstream", "latency_downstream", "noop_downstream"]


def test_toxic_creation_checks_stream_then_type_then_name_as_toxiproxy_does() -> None:
    api = ToxiproxyApi(ProxyRegistry())
    results = _calls(
        api,
        [
            ("POST", "/proxies", _disabled("p")),
            ("POST", "/proxies/p/toxics", {"type": "latency", "name": "x"}),
            ("POST", "/proxies/p/toxics", {"type": "nope", "stream": "sideways"}),
            ("POST", "/proxies/p/toxics", {"type": "nope", "name": "x"}),
            ("POST", "/proxies/p/toxics", {"type": "latency", "name": "x", "attributes": []}),
            ("POST", "/proxies/p/toxics", {"type": "latency", "attributes": {"latncy": 1}}),
        ],
    )
    assert [r.status for r in results[1:]] == [200, 400, 400, 409, 400]
    assert results[2].json()["error"] == "stream was invalid, can be either upstream or downstream"
    assert results[3].json()["error"] == "invalid toxic type"
    assert results[5].json()["error"].startswith("bad request body: ")
    assert "latncy" in results[5].json()["error"]


def test_a_toxic_update_merges_attributes_and_ignores_name_type_and_stream() -> None:
    api = ToxiproxyApi(ProxyRegistry())
    results = _calls(
        api,
        [
            ("POST", "/proxies", _disabled("p")),
            ("POST", "/proxies/p/toxics", {"type": "latency", "attributes": {"latency": 9}}),
            (
                "PATCH",
                "/proxies/p/toxics/latency_downstream",
                {"name": "z", "stream": "upstream", "toxicity": 0.25, "attributes": {"jitter": 1}},
            ),
        ],
    )
    assert results[2].json() == {
        "attributes": {"latency": 9, "jitter": 1},
        "name": "latency_downstream",
        "type": "latency",
        "stream": "downstream",
        "toxicity": 0.25,
    }


def test_populate_keeps_an_identical_proxy_with_its_toxics() -> None:
    api = ToxiproxyApi(ProxyRegistry())
    results = _calls(
        api,
        [
            ("POST", "/proxies", _disabled("a")),
            ("POST", "/proxies/a/toxics", {"type": "latency", "attributes": {"latency": 7}}),
            ("POST", "/populate", [_disabled("a"), _disabled("b", 7002)]),
            ("POST", "/populate", [{**_disabled("a"), "listen": "localhost:7001"}]),
        ],
    )
    assert results[2].status == 201
    kept, created = results[2].json()["proxies"]
    assert kept["name"] == "a" and [t["name"] for t in kept["toxics"]] == ["latency_downstream"]
    assert created["name"] == "b" and created["toxics"] == []
    assert results[3].json()["proxies"][0]["toxics"] != []  # localhost resolves to 127.0.0.1


def test_populate_replaces_a_proxy_whose_listen_or_upstream_differs_dropping_its_toxics() -> None:
    api = ToxiproxyApi(ProxyRegistry())
    results = _calls(
        api,
        [
            ("POST", "/proxies", _disabled("a")),
            ("POST", "/proxies/a/toxics", {"type": "noop"}),
            ("POST", "/populate", [_disabled("a", upstream="127.0.0.1:2")]),
        ],
    )
    (replaced,) = results[2].json()["proxies"]
    assert replaced["upstream"] == "127.0.0.1:2" and replaced["toxics"] == []
    assert [e["event"] for e in api.registry.log.events("a")][-2:] == [
        "proxy_deleted",
        "proxy_created",
    ]


def test_populate_creates_nothing_when_any_entry_is_invalid() -> None:
    api = ToxiproxyApi(ProxyRegistry())
    for entries, error in [
        ([_disabled("a"), {"upstream": "127.0.0.1:1"}], "missing required field: name at proxy 2"),
        ([_disabled("a"), {"name": "b"}], "missing required field: upstream at proxy 2"),
        ([_disabled("a"), {**_disabled("b"), "listen": "nohost"}], "at proxy 2"),
        ([_disabled("a"), {**_disabled("b"), "enabled": "yes"}], "'enabled'"),
        ([_disabled("a"), "b"], "bad request body"),
    ]:
        response = _call(api, "POST", "/populate", entries)
        assert response.status == 400, entries
        assert response.headers["Content-Type"] == "application/json"
        body = response.json()
        assert list(body) == ["error", "status", "proxies"] and body["proxies"] is None
        assert error in body["error"] and body["status"] == 400
        assert api.registry.proxies == {}
    not_a_list = _call(api, "POST", "/populate", {"name": "a"})
    assert not_a_list.status == 400 and not_a_list.json()["proxies"] is None


def test_populate_with_no_entries_answers_null_proxies() -> None:
    response = _call(ToxiproxyApi(ProxyRegistry()), "POST", "/populate", [])
    assert response.status == 201 and response.body == b'{"proxies":null}'


def test_proxies_are_listed_by_name_with_toxiproxys_keys() -> None:
    api = ToxiproxyApi(ProxyRegistry())
    results = _calls(
        api,
        [
            ("POST", "/proxies", _disabled("b", 7002)),
            ("POST", "/proxies", _disabled("a")),
            ("GET", "/proxies", None),
        ],
    )
    listed = results[2].json()
    assert list(listed) == ["a", "b"]
    assert list(listed["a"]) == ["name", "listen", "upstream", "enabled", "Logger", "toxics"]


def test_api_rejects_bodies_that_are_not_json_or_lack_required_fields() -> None:
    api = ToxiproxyApi(ProxyRegistry())
    bad_json = _call(api, "POST", "/proxies", b"{nope")
    assert bad_json.status == 400 and bad_json.json()["error"].startswith("bad request body: ")
    assert _call(api, "POST", "/proxies", b"").json()["error"] == "bad request body: EOF"
    response = _call(api, "POST", "/proxies", {"name": "x"})
    assert response.status == 400
    assert response.json()["error"] == "missing required field: upstream"
    response = _call(api, "POST", "/proxies", {"name": "x", "upstream": "nohost"})
    assert response.status == 400 and "host:port" in response.json()["error"]


def test_go_json_is_compact_and_escapes_html_characters() -> None:
    assert (
        go_json({"a": [1, "<&>"], "é": None})
        == b'{"a":[1,"\\u003c\\u0026\\u003e"],"\xc3\xa9":null}'
    )


def test_http_requests_are_parsed_and_responses_encoded_with_content_length() -> None:
    async def parse(raw: bytes) -> tuple[str, str, dict[str, str], bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(raw)
        reader.feed_eof()
        request = await read_request(reader)
        return request.method, request.target, request.headers, request.body

    req = (
        b"POST /proxies HTTP/1.1\r\nHost: x\r\nUser-Agent: Mozilla/5\r\nContent-Length: 2\r\n\r\n{}"
    )
    assert asyncio.run(parse(req)) == (
        "POST",
        "/proxies",
        {"host": "x", "user-agent": "Mozilla/5", "content-length": "2"},
        b"{}",
    )
    chunked = b"POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    with pytest.raises(MqbenchError, match="chunked"):
        asyncio.run(parse(chunked))
    response = encode_response(ApiResponse(201, {"Content-Type": "application/json"}, b'{"a":1}'))
    assert response.startswith(b"HTTP/1.1 201 Created\r\n")
    assert b"Content-Length: 7\r\n" in response and response.endswith(b'{"a":1}')
    assert b"Server: mqbench-proxy/" in response and b"Date: " in response
    assert b"Content-Length" not in encode_response(ApiResponse(204))
    assert b"Content-Length: 0\r\n" in encode_response(ApiResponse(405))


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
