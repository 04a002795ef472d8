"""The Toxiproxy HTTP API subset, served with asyncio streams (stdlib only).

Routes (JSON bodies; errors are ``{"error": message, "status": code}``):

    GET    /version                          200 text, e.g. ``mqbench-proxy/0.1.0``
    GET    /proxies                          200 {name: proxy}
    POST   /proxies                          201 proxy | 409 exists | 400 bad
    POST   /populate                         201 {"proxies": [proxy, ...]}
    GET    /proxies/{p}                      200 proxy | 404
    POST   /proxies/{p}  (or PATCH)          200 proxy (listen, upstream, enabled)
    DELETE /proxies/{p}                      204
    GET    /proxies/{p}/toxics               200 [toxic, ...]
    POST   /proxies/{p}/toxics               200 toxic | 409 exists | 400 bad | 404
    GET    /proxies/{p}/toxics/{t}           200 toxic | 404
    POST   /proxies/{p}/toxics/{t} (PATCH)   200 toxic (toxicity, attributes)
    DELETE /proxies/{p}/toxics/{t}           204
    POST   /reset                            204
    GET    /proxies/{p}/events?since=N       200 [event, ...]   (mqbench extension)
    GET    /proxies/{p}/connections          200 [conn, ...]    (mqbench extension)
    GET    /events?since=N                   200 [event, ...]   (all proxies, also deleted)

A proxy is ``{name, listen, upstream, enabled, toxics}``; a toxic is
``{name, type, stream, toxicity, attributes}``. Every response closes the connection
(``Connection: close``); requests must carry ``Content-Length`` when they have a body.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlsplit

from mqbench import __version__
from mqbench.faults.tcp import ApiError, ProxyRegistry
from mqbench.faults.toxics import ToxicError, toxic_from_json, validate_toxic

SERVER_NAME: Final = "mqbench-proxy"
"""Product token in ``/version`` and the ``Server`` header."""
MAX_HEADER_BYTES: Final = 65536
"""Largest request head accepted."""
MAX_BODY_BYTES: Final = 1 << 20
"""Largest request body accepted."""
REQUEST_TIMEOUT_S: Final = 10.0
"""How long a client may take to send its request."""

Response = tuple[int, Any]
"""An HTTP status and a JSON-able body (None: no body; str: text/plain)."""


def version_text() -> str:
    """What ``GET /version`` answers."""
    return f"{SERVER_NAME}/{__version__}"


def _body_object(body: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise ApiError(400, f"{what}: request body must be a JSON object")
    return body


def _opt_str(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise ApiError(400, f"{key!r} must be a string")
    return value


def _opt_bool(body: Mapping[str, Any], key: str) -> bool | None:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise ApiError(400, f"{key!r} must be true or false")
    return value


class ToxiproxyApi:
    """Maps API requests onto a ``ProxyRegistry``; independent of the HTTP transport."""

    def __init__(self, registry: ProxyRegistry) -> None:
        """Serve ``registry``."""
        self.registry = registry

    async def handle(self, method: str, target: str, body: bytes) -> Response:
        """Answer one request; ``target`` is the request path with its query string."""
        try:
            parts = urlsplit(target)
            segments = [unquote(s) for s in parts.path.strip("/").split("/") if s]
            query = parse_qs(parts.query)
            payload: Any = None
            if body:
                try:
                    payload = json.loads(body)
                except ValueError as exc:
                    raise ApiError(400, f"request body is not JSON: {exc}") from None
            return await self._route(method.upper(), segments, query, payload)
        except ToxicError as exc:
            return 400, {"error": str(exc), "status": 400}
        except ApiError as exc:
            return exc.status, {"error": str(exc), "status": exc.status}

    async def _route(
        self, method: str, seg: list[str], query: Mapping[str, list[str]], body: Any
    ) -> Response:
        reg = self.registry
        n = len(seg)
        if seg == ["version"] and method == "GET":
            return 200, version_text()
        if seg == ["reset"] and method == "POST":
            await reg.reset()
            return 204, None
        if seg == ["events"] and method == "GET":
            return 200, reg.log.events(None, _since(query))
        if seg == ["populate"] and method == "POST":
            return 201, {"proxies": await self._populate(body)}
        if n >= 1 and seg[0] == "proxies":
            if n == 1:
                if method == "GET":
                    return 200, {name: p.to_json() for name, p in reg.proxies.items()}
                if method == "POST":
                    return 201, (await self._create(body)).to_json()
            elif n == 2:
                if method == "GET":
                    return 200, reg.get(seg[1]).to_json()
                if method in ("POST", "PATCH"):
                    return 200, await self._update_proxy(seg[1], body)
                if method == "DELETE":
                    await reg.delete(seg[1])
                    return 204, None
            elif n == 3 and seg[2] == "events" and method == "GET":
                reg.get(seg[1])
                return 200, reg.log.events(seg[1], _since(query))
            elif n == 3 and seg[2] == "connections" and method == "GET":
                return 200, reg.get(seg[1]).connections
            elif n == 3 and seg[2] == "toxics":
                proxy = reg.get(seg[1])
                if method == "GET":
                    return 200, [t.to_json() for t in proxy.toxics.values()]
                if method == "POST":
                    return 200, proxy.add_toxic(toxic_from_json(body)).to_json()
            elif n == 4 and seg[2] == "toxics":
                proxy = reg.get(seg[1])
                if method == "GET":
                    return 200, proxy.get_toxic(seg[3]).to_json()
                if method in ("POST", "PATCH"):
                    return 200, self._update_toxic(seg[1], seg[3], body)
                if method == "DELETE":
                    proxy.remove_toxic(seg[3])
                    return 204, None
            else:
                raise ApiError(404, f"no such resource: /{'/'.join(seg)}")
            raise ApiError(405, f"{method} is not allowed on /{'/'.join(seg)}")
        raise ApiError(404, f"no such resource: /{'/'.join(seg)}")

    async def _create(self, body: Any) -> Any:
        obj = _body_object(body, "create proxy")
        name = _opt_str(obj, "name")
        upstream = _opt_str(obj, "upstream")
        if not name or not upstream:
            raise ApiError(400, "create proxy: 'name' and 'upstream' are required")
        listen = _opt_str(obj, "listen") or "127.0.0.1:0"
        enabled = _opt_bool(obj, "enabled")
        return await self.registry.create(
            name, listen, upstream, enabled=True if enabled is None else enabled
        )

    async def _update_proxy(self, name: str, body: Any) -> Any:
        obj = _body_object(body, "update proxy")
        proxy = self.registry.get(name)
        await proxy.update(
            listen=_opt_str(obj, "listen"),
            upstream=_opt_str(obj, "upstream"),
            enabled=_opt_bool(obj, "enabled"),
        )
        return proxy.to_json()

    def _update_toxic(self, proxy_name: str, toxic_name: str, body: Any) -> Any:
        obj = _body_object(body, "update toxic")
        proxy = self.registry.get(proxy_name)
        old = proxy.get_toxic(toxic_name)
        attributes = dict(old.attributes)
        new_attributes = obj.get("attributes") or {}
        if not isinstance(new_attributes, Mapping):
            raise ApiError(400, "toxic attributes must be a JSON object")
        attributes.update(new_attributes)
        toxic = validate_toxic(
            old.type,
            attributes,
            stream=obj.get("stream", old.stream),
            toxicity=obj.get("toxicity", old.toxicity),
            name=toxic_name,
        )
        if toxic.stream != old.stream:
            raise ApiError(400, f"toxic {toxic_name!r}: the stream of a toxic cannot change")
        return proxy.update_toxic(toxic_name, toxic).to_json()

    async def _populate(self, body: Any) -> list[Any]:
        if not isinstance(body, list):
            raise ApiError(400, "populate: request body must be a JSON list of proxies")
        created = []
        for item in body:
            obj = _body_object(item, "populate")
            name = _opt_str(obj, "name")
            existing = self.registry.proxies.get(name or "")
            if existing is not None and (
                existing.upstream != obj.get("upstream")
                or obj.get("listen") not in (None, existing.listen)
            ):
                await self.registry.delete(existing.name)
                existing = None
            proxy = existing or await self._create(obj)
            created.append(proxy.to_json())
        return created


def _since(query: Mapping[str, list[str]]) -> int:
    values = query.get("since", ["0"])
    try:
        return int(values[-1])
    except ValueError:
        raise ApiError(400, f"'since' must be an integer, got {values[-1]!r}") from None


def encode_response(status: int, body: Any) -> bytes:
    """An HTTP/1.1 response with ``Connection: close`` for ``(status, body)``."""
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
    if body is None or status == 204:
        payload, ctype = b"", None
    elif isinstance(body, str):
        payload, ctype = body.encode(), "text/plain; charset=utf-8"
    else:
        payload, ctype = json.dumps(body).encode(), "application/json"
    head = [f"HTTP/1.1 {status} {reason}", f"Server: {SERVER_NAME}", "Connection: close"]
    if ctype is not None:
        head.append(f"Content-Type: {ctype}")
    if status != 204:
        head.append(f"Content-Length: {len(payload)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
    """Read one request: ``(method, target, body)``; ``ApiError`` 400/411/413 when bad."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise ApiError(413, "request head too large") from None
    lines = head.decode("latin-1").split("\r\n")
    request_line = lines[0].split()
    if len(request_line) != 3 or not request_line[2].startswith("HTTP/1."):
        raise ApiError(400, f"bad request line: {lines[0][:100]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise ApiError(411, "chunked bodies are not supported; send Content-Length")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise ApiError(400, "bad Content-Length") from None
    if length < 0 or length > MAX_BODY_BYTES:
        raise ApiError(413, f"request body must be 0..{MAX_BODY_BYTES} bytes")
    body = await reader.readexactly(length) if length else b""
    return request_line[0], request_line[1], body


class HttpApiServer:
    """The API over HTTP/1.1 on one TCP address (one request per connection)."""

    def __init__(self, api: ToxiproxyApi) -> None:
        """Serve ``api`` once started."""
        self.api = api
        self._server: asyncio.Server | None = None
        self.host = ""
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        """Listen on ``host:port`` (port 0: any free port; see ``port`` afterwards)."""
        self._server = await asyncio.start_server(
            self._serve, host, port, limit=MAX_HEADER_BYTES, reuse_address=True
        )
        bound = self._server.sockets[0].getsockname()
        self.host, self.port = str(bound[0]), int(bound[1])

    async def stop(self) -> None:
        """Stop listening."""
        server, self._server = self._server, None
        if server is not None:
            server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                method, target, body = await asyncio.wait_for(
                    read_request(reader), REQUEST_TIMEOUT_S
                )
                status, payload = await self.api.handle(method, target, body)
            except ApiError as exc:
                status, payload = exc.status, {"error": str(exc), "status": exc.status}
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                return
            writer.write(encode_response(status, payload))
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        finally:
            writer.close()
