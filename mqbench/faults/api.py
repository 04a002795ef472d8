"""Toxiproxy 2.12.0's HTTP API as request -> response (``api_server`` puts it on HTTP).

Routes, as Toxiproxy 2.12.0 answers them (JSON written compactly, in Go's key order):

    GET    /version                          200 {"version": "2.12.0"}\\n
    POST   /reset                            204
    GET    /proxies                          200 {name: proxy}  (names sorted)
    POST   /proxies                          201 proxy | 409 | 400
    POST   /populate                         201 {"proxies": [proxy...] | null} | 400 | 500
    GET    /proxies/{p}                      200 proxy | 404
    POST   /proxies/{p}  (or PATCH)          200 proxy (listen, upstream, enabled)
    DELETE /proxies/{p}                      204 | 404
    GET    /proxies/{p}/toxics               200 [toxic...]  (upstream ones first)
    POST   /proxies/{p}/toxics               200 toxic, every attribute filled in | 409 | 400
    GET    /proxies/{p}/toxics/{t}           200 toxic | 404
    POST   /proxies/{p}/toxics/{t} (PATCH)   200 toxic (attributes merged, toxicity)
    DELETE /proxies/{p}/toxics/{t}           204 | 404
    GET    /proxies/{p}/events?since=N       200 [event...]   (mqbench extension)
    GET    /proxies/{p}/connections          200 [conn...]    (mqbench extension)
    GET    /events?since=N                   200 [event...]   (mqbench extension)

A proxy is ``{name, listen, upstream, enabled, Logger, toxics}``; a toxic is
``{attributes, name, type, stream, toxicity}``. Errors are ``{"error": msg, "status": code}``
plus a newline, sent as ``text/plain; charset=utf-8`` (Go's ``http.Error``), except from
``/populate``, which answers ``{"error", "status", "proxies"}`` as ``application/json``.

As in Toxiproxy (gorilla/mux middleware), only a request that matches a route gets an
``X-Toxiproxy-Request-Id`` header (a new 20-character xid every time, never the client's)
and passes the browser check: a ``User-Agent`` starting with ``Mozilla/`` is refused with
403 ``User agent not allowed``. A path no route knows answers 404 ``404 page not found``; a
known path with another method answers 405 with an empty body. ``api_server`` adds
``Server: mqbench-proxy/<version>`` to every answer (Toxiproxy sends no ``Server`` header;
this is how ``ToxiproxyClient.is_builtin`` tells the two apart).
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import socket
import struct
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlsplit

from mqbench import __version__
from mqbench.faults.tcp import (
    ApiError,
    PopulateError,
    ProxyRegistry,
    ProxySpec,
    ToxicProxy,
    split_hostport,
)
from mqbench.faults.toxics import (
    DOWNSTREAM,
    ToxicError,
    check_stream,
    check_type,
    validate_toxic,
)

TOXIPROXY_VERSION: Final = "2.12.0"
"""The Toxiproxy release whose API and toxic semantics the built-in proxy follows."""
SERVER_NAME: Final = "mqbench-proxy"
"""Product token of the ``Server`` header (and of the process's ready line)."""
REQUEST_ID_HEADER: Final = "X-Toxiproxy-Request-Id"
"""Toxiproxy's request-id response header."""
DEFAULT_LISTEN: Final = "127.0.0.1:0"
"""Listen address of a proxy created without one (Toxiproxy: every interface)."""

_TEXT: Final = "text/plain; charset=utf-8"
_JSON: Final = "application/json"


def version_text() -> str:
    """mqbench's own product token, e.g. ``mqbench-proxy/0.1.0``."""
    return f"{SERVER_NAME}/{__version__}"


def go_json(value: Any) -> bytes:
    """``value`` as Go's ``json.Marshal`` writes it: compact, UTF-8, ``<>&`` escaped."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for char, escape in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escape)
    return text.encode()


class RequestIds:
    """Request ids as Toxiproxy makes them (rs/xid): 12 bytes in 20 base32hex characters.

    Time in seconds (4 bytes), a machine id (3), the process id (2), a counter that starts
    at a random value (3); sortable by time, unique per server.
    """

    _ALPHABET: Final = "0123456789abcdefghijklmnopqrstuv"

    def __init__(self) -> None:
        """Draw the machine id and the counter's start."""
        self._machine = zlib.crc32(socket.gethostname().encode()).to_bytes(4, "big")[1:]
        self._pid = (os.getpid() & 0xFFFF).to_bytes(2, "big")
        self._counter = itertools.count(secrets.randbits(24))

    def new(self) -> str:
        """A new id."""
        raw = (
            struct.pack(">I", int(time.time()) & 0xFFFFFFFF)
            + self._machine
            + self._pid
            + (next(self._counter) & 0xFFFFFF).to_bytes(3, "big")
        )
        bits = int.from_bytes(raw, "big") << 4  # 96 bits -> 20 groups of 5
        return "".join(self._ALPHABET[(bits >> (5 * (19 - i))) & 31] for i in range(20))


@dataclass
class ApiResponse:
    """One answer: status, headers (in order) and body bytes."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def json(self) -> Any:
        """The body parsed as JSON (tests and tools)."""
        return json.loads(self.body)


def _json_response(status: int, value: Any, content_type: str = _JSON) -> ApiResponse:
    return ApiResponse(status, {"Content-Type": content_type}, go_json(value))


def error_response(status: int, message: str) -> ApiResponse:
    """Toxiproxy's ``apiError``: JSON through Go's ``http.Error`` (text/plain + newline)."""
    body = go_json({"error": message, "status": status}) + b"\n"
    return ApiResponse(status, {"Content-Type": _TEXT, "X-Content-Type-Options": "nosniff"}, body)


_NOT_FOUND = ApiResponse(
    404, {"Content-Type": _TEXT, "X-Content-Type-Options": "nosniff"}, b"404 page not found\n"
)
_BROWSER = ApiResponse(
    403, {"Content-Type": _TEXT, "X-Content-Type-Options": "nosniff"}, b"User agent not allowed\n"
)

Handler = Callable[[dict[str, str], Mapping[str, list[str]], bytes], Awaitable[ApiResponse]]
"""``(path variables, query, body) -> response``."""


def _decode(body: bytes) -> Any:
    """The body as JSON; ``ApiError`` 400 ``bad request body: ...`` like Toxiproxy's decoder."""
    if not body.strip():
        raise ApiError(400, "bad request body: EOF")
    try:
        return json.loads(body)
    except ValueError as exc:
        raise ApiError(400, f"bad request body: {exc}") from None


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ApiError(400, f"bad request body: {what} must be a JSON object")
    return value


def _opt_str(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise ApiError(400, f"bad request body: {key!r} must be a string")
    return value


def _opt_bool(body: Mapping[str, Any], key: str) -> bool | None:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise ApiError(400, f"bad request body: {key!r} must be true or false")
    return value


def _since(query: Mapping[str, list[str]]) -> int:
    values = query.get("since", ["0"])
    try:
        return int(values[-1])
    except ValueError:
        raise ApiError(400, f"'since' must be an integer, got {values[-1]!r}") from None


def _toxic_error(exc: ToxicError) -> ApiError:
    """A rejected toxic as Toxiproxy words it (its own text where it checks the same thing)."""
    if exc.problem == "stream":
        return ApiError(400, "stream was invalid, can be either upstream or downstream")
    if exc.problem == "type":
        return ApiError(400, "invalid toxic type")
    return ApiError(400, f"bad request body: {exc}")


class ToxiproxyApi:
    """Maps API requests onto a ``ProxyRegistry``; independent of the HTTP transport."""

    def __init__(self, registry: ProxyRegistry) -> None:
        """Serve ``registry``."""
        self.registry = registry
        self.request_ids = RequestIds()
        self._routes: list[tuple[tuple[str, ...], dict[str, Handler]]] = [
            (("version",), {"GET": self._version}),
            (("reset",), {"POST": self._reset}),
            (("proxies",), {"GET": self._proxy_index, "POST": self._proxy_create}),
            (("populate",), {"POST": self._populate}),
            (
                ("proxies", "{proxy}"),
                {
                    "GET": self._proxy_show,
                    "POST": self._proxy_update,
                    "PATCH": self._proxy_update,
                    "DELETE": self._proxy_delete,
                },
            ),
            (
                ("proxies", "{proxy}", "toxics"),
                {"GET": self._toxic_index, "POST": self._toxic_create},
            ),
            (
                ("proxies", "{proxy}", "toxics", "{toxic}"),
                {
                    "GET": self._toxic_show,
                    "POST": self._toxic_update,
                    "PATCH": self._toxic_update,
                    "DELETE": self._toxic_delete,
                },
            ),
            (("events",), {"GET": self._events}),
            (("proxies", "{proxy}", "events"), {"GET": self._proxy_events}),
            (("proxies", "{proxy}", "connections"), {"GET": self._connections}),
        ]

    async def handle(
        self,
        method: str,
        target: str,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
    ) -> ApiResponse:
        """Answer one request; ``target`` is the path with its query, ``headers`` lower-case."""
        parts = urlsplit(target)
        segments = unquote(parts.path).split("/")
        if not segments or segments[0] != "":
            return _copy(_NOT_FOUND)
        found = self._match(segments[1:])
        if found is None:
            return _copy(_NOT_FOUND)
        methods, variables = found
        handler = methods.get(method)
        if handler is None:
            return ApiResponse(405)
        request_id = {REQUEST_ID_HEADER: self.request_ids.new()}
        user_agent = (headers or {}).get("user-agent", "")
        if user_agent.startswith("Mozilla/"):
            response = _copy(_BROWSER)
        else:
            try:
                response = await handler(variables, parse_qs(parts.query), body)
            except ApiError as exc:
                response = error_response(exc.status, str(exc))
        response.headers.update(request_id)
        return response

    def _match(self, segments: list[str]) -> tuple[dict[str, Handler], dict[str, str]] | None:
        for pattern, methods in self._routes:
            if len(pattern) != len(segments):
                continue
            variables: dict[str, str] = {}
            for want, got in zip(pattern, segments, strict=True):
                if want.startswith("{"):
                    if not got:
                        break
                    variables[want.strip("{}")] = got
                elif want != got:
                    break
            else:
                return methods, variables
        return None

    # -- server -------------------------------------------------------------------------

    async def _version(self, _v: dict[str, str], _q: Any, _b: bytes) -> ApiResponse:
        body = f'{{"version": "{TOXIPROXY_VERSION}"}}\n'.encode()
        return ApiResponse(200, {"Content-Type": "application/json;charset=utf-8"}, body)

    async def _reset(self, _v: dict[str, str], _q: Any, _b: bytes) -> ApiResponse:
        await self.registry.reset()
        return ApiResponse(204)

    async def _events(self, _v: dict[str, str], query: Any, _b: bytes) -> ApiResponse:
        return _json_response(200, self.registry.log.events(None, _since(query)))

    # -- proxies ------------------------------------------------------------------------

    async def _proxy_index(self, _v: dict[str, str], _q: Any, _b: bytes) -> ApiResponse:
        proxies = self.registry.proxies
        return _json_response(200, {name: proxies[name].to_json() for name in sorted(proxies)})

    async def _proxy_create(self, _v: dict[str, str], _q: Any, body: bytes) -> ApiResponse:
        spec = _proxy_spec(_decode(body), None)
        proxy = await self.registry.create(
            spec.name, spec.listen, spec.upstream, enabled=spec.enabled
        )
        return _json_response(201, proxy.to_json())

    async def _proxy_show(self, v: dict[str, str], _q: Any, _b: bytes) -> ApiResponse:
        return _json_response(200, self.registry.get(v["proxy"]).to_json())

    async def _proxy_update(self, v: dict[str, str], _q: Any, body: bytes) -> ApiResponse:
        proxy = self.registry.get(v["proxy"])
        obj = _object(_decode(body), "a proxy")
        await proxy.update(
            listen=_opt_str(obj, "listen"),
            upstream=_opt_str(obj, "upstream"),
            enabled=_opt_bool(obj, "enabled"),
        )
        return _json_response(200, proxy.to_json())

    async def _proxy_delete(self, v: dict[str, str], _q: Any, _b: bytes) -> ApiResponse:
        await self.registry.delete(v["proxy"])
        return ApiResponse(204)

    async def _populate(self, _v: dict[str, str], _q: Any, body: bytes) -> ApiResponse:
        """Toxiproxy's populate: every entry checked before anything changes."""
        try:
            entries = _decode(body)
            if not isinstance(entries, list):
                raise ApiError(400, "bad request body: populate expects a JSON list of proxies")
            specs = [_proxy_spec(entry, i + 1) for i, entry in enumerate(entries)]
        except ApiError as exc:
            return _populate_response(exc.status, [], str(exc))
        try:
            proxies = await self.registry.populate(specs)
        except PopulateError as exc:
            return _populate_response(exc.status, exc.proxies, str(exc))
        return _populate_response(201, proxies)

    async def _proxy_events(self, v: dict[str, str], query: Any, _b: bytes) -> ApiResponse:
        self.registry.get(v["proxy"])
        return _json_response(200, self.registry.log.events(v["proxy"], _since(query)))

    async def _connections(self, v: dict[str, str], _q: Any, _b: bytes) -> ApiResponse:
        return _json_response(200, self.registry.get(v["proxy"]).connections)

    # -- toxics -------------------------------------------------------------------------

    async def _toxic_index(self, v: dict[str, str], _q: Any, _b: bytes) -> ApiResponse:
        proxy = self.registry.get(v["proxy"])
        return _json_response(200, [t.to_json() for t in proxy.ordered_toxics()])

    async def _toxic_create(self, v: dict[str, str], _q: Any, body: bytes) -> ApiResponse:
        """Checked in Toxiproxy's order: body, stream, type, name taken, attributes."""
        proxy = self.registry.get(v["proxy"])
        obj = _object(_decode(body), "a toxic")
        try:
            stream = check_stream(_or(obj.get("stream"), DOWNSTREAM))
            name = obj.get("name") or f"{obj.get('type')}_{stream}"
            check_type(obj.get("type"))
            if isinstance(name, str) and name in proxy.toxics:
                raise ApiError(409, "toxic already exists")
            unknown = set(obj) - {"name", "type", "stream", "toxicity", "attributes"}
            if unknown:
                raise ToxicError(f"toxic has unknown field(s): {', '.join(sorted(unknown))}")
            attributes = obj.get("attributes") or {}
            if not isinstance(attributes, Mapping):
                raise ToxicError("toxic attributes must be a JSON object", "attribute")
            toxicity = _or(obj.get("toxicity"), 1.0)
            toxic = validate_toxic(
                obj.get("type"), attributes, stream=stream, toxicity=toxicity, name=name
            )
        except ToxicError as exc:
            raise _toxic_error(exc) from None
        return _json_response(200, proxy.add_toxic(toxic).to_json())

    async def _toxic_show(self, v: dict[str, str], _q: Any, _b: bytes) -> ApiResponse:
        proxy = self.registry.get(v["proxy"])
        return _json_response(200, proxy.get_toxic(v["toxic"]).to_json())

    async def _toxic_update(self, v: dict[str, str], _q: Any, body: bytes) -> ApiResponse:
        """Toxiproxy reads only ``attributes`` (merged) and ``toxicity``; the rest is ignored."""
        proxy = self.registry.get(v["proxy"])
        old = proxy.get_toxic(v["toxic"])
        obj = _object(_decode(body), "a toxic")
        new_attributes = obj.get("attributes") or {}
        try:
            if not isinstance(new_attributes, Mapping):
                raise ToxicError("toxic attributes must be a JSON object", "attribute")
            toxic = validate_toxic(
                old.type,
                {**old.attributes, **new_attributes},
                stream=old.stream,
                toxicity=_or(obj.get("toxicity"), old.toxicity),
                name=old.name,
            )
        except ToxicError as exc:
            raise _toxic_error(exc) from None
        return _json_response(200, proxy.update_toxic(old.name, toxic).to_json())

    async def _toxic_delete(self, v: dict[str, str], _q: Any, _b: bytes) -> ApiResponse:
        self.registry.get(v["proxy"]).remove_toxic(v["toxic"])
        return ApiResponse(204)


def _or(value: Any, default: Any) -> Any:
    """``default`` for a JSON null or a missing key (Go leaves the field at its default)."""
    return default if value is None else value


def _copy(response: ApiResponse) -> ApiResponse:
    return ApiResponse(response.status, dict(response.headers), response.body)


def _proxy_spec(entry: Any, position: int | None) -> ProxySpec:
    """A proxy given as JSON, checked; ``position`` (1-based) for populate's messages."""
    where = f" at proxy {position}" if position is not None else ""
    obj = _object(entry, "a proxy")
    name = _opt_str(obj, "name")
    upstream = _opt_str(obj, "upstream")
    if not name:
        raise ApiError(400, f"missing required field: name{where}")
    if not upstream:
        raise ApiError(400, f"missing required field: upstream{where}")
    if "/" in name:
        raise ApiError(400, f"bad request body: proxy name must not contain '/'{where}")
    listen = _opt_str(obj, "listen") or DEFAULT_LISTEN
    enabled = _opt_bool(obj, "enabled")
    try:
        split_hostport(listen)
        split_hostport(upstream)
    except ApiError as exc:
        raise ApiError(400, f"bad request body: {exc}{where}") from None
    return ProxySpec(name, listen, upstream, True if enabled is None else enabled)


def _populate_response(
    status: int, proxies: list[ToxicProxy], error: str | None = None
) -> ApiResponse:
    """``{"error", "status", "proxies"}`` (error fields only on failure; no proxies: null)."""
    body: dict[str, Any] = {} if error is None else {"error": error, "status": status}
    body["proxies"] = [p.to_json() for p in proxies] or None
    return _json_response(status, body)
