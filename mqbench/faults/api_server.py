"""The Toxiproxy API (``mqbench.faults.api``) over HTTP/1.1, with asyncio streams.

One request per connection (``Connection: close``); request bodies need
``Content-Length``. Every answer carries ``Date`` and ``Server: mqbench-proxy/<version>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

from mqbench.faults.api import ApiResponse, ToxiproxyApi, error_response, version_text
from mqbench.faults.tcp import ApiError

MAX_HEADER_BYTES: Final = 65536
"""Largest request head accepted."""
MAX_BODY_BYTES: Final = 1 << 20
"""Largest request body accepted."""
REQUEST_TIMEOUT_S: Final = 10.0
"""How long a client may take to send its request."""


def encode_response(response: ApiResponse) -> bytes:
    """``response`` as HTTP/1.1 with ``Date``, ``Server``, ``Connection: close``."""
    status = response.status
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
    headers = {
        "Date": email.utils.formatdate(usegmt=True),
        "Server": version_text(),
        "Connection": "close",
        **response.headers,
    }
    if status != 204 and status >= 200:
        headers["Content-Length"] = str(len(response.body))
    head = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.body


@dataclass(frozen=True)
class HttpRequest:
    """One parsed request (header names lower-case)."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes


async def read_request(reader: asyncio.StreamReader) -> HttpRequest:
    """Read one request; ``ApiError`` 400/411/413 when it is malformed or too large."""
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
    return HttpRequest(request_line[0], request_line[1], headers, body)


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
                request = await asyncio.wait_for(read_request(reader), REQUEST_TIMEOUT_S)
                response = await self.api.handle(
                    request.method, request.target, request.body, request.headers
                )
            except ApiError as exc:
                response = error_response(exc.status, str(exc))
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                return
            writer.write(encode_response(response))
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        finally:
            writer.close()
