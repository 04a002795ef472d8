"""A typed client for any server of the Toxiproxy HTTP API (real Toxiproxy or mqbench's own).

It calls the API directly with ``urllib`` rather than wrapping ``toxiproxy-python``: that
library keeps host and port in class attributes shared by every caller (one server per
process), sets no timeouts (``requests`` then waits forever on a silent server), reads the
whole proxy list before each create, drops the server's replies to toxic creation, and
raises bare exceptions without the server's message. Here every request has a timeout, the
environment's HTTP proxy settings are ignored (the API is on loopback), toxics are
validated before they are sent, and every failure is a ``FaultError`` with one line naming
the URL and the cause. ``toxiproxy-python`` remains the interoperability oracle in the
tests of the built-in server.

``AsyncToxiproxyClient`` runs the same calls in a worker thread for use from an event loop
(required when that loop also hosts the built-in ``ProxyServer``).
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlsplit

from mqbench.errors import MqbenchError, ScenarioError
from mqbench.faults.toxics import DOWNSTREAM, Toxic, ToxicError, toxic_from_json, validate_toxic

DEFAULT_URL: Final = "http://127.0.0.1:8474"
"""Toxiproxy's default API address."""
DEFAULT_TIMEOUT_S: Final = 5.0
"""Timeout of every API request."""


class FaultError(MqbenchError):
    """Fault injection failed: the Toxiproxy API is unreachable or refused a request."""


class ToxiproxyUnreachable(FaultError):
    """Nothing answered at the Toxiproxy URL within the timeout."""


class ToxiproxyApiError(FaultError):
    """The Toxiproxy API answered with an error status (``status``)."""

    def __init__(self, status: int, message: str) -> None:
        """Fail with HTTP ``status`` and a one-line ``message``."""
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ProxyInfo:
    """A proxy as the API describes it."""

    name: str
    listen: str
    upstream: str
    enabled: bool
    toxics: tuple[Toxic, ...] = ()

    @property
    def listen_port(self) -> int:
        """The port clients connect to."""
        return int(self.listen.rpartition(":")[2])

    @property
    def listen_host(self) -> str:
        """The host clients connect to (``0.0.0.0``/``[::]`` become loopback)."""
        host = self.listen.rpartition(":")[0].strip("[]")
        return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)

    @classmethod
    def from_json(cls, data: Any) -> ProxyInfo:
        """Parse the API's ``{name, listen, upstream, enabled, toxics}``."""
        if not isinstance(data, Mapping):
            raise FaultError(f"Toxiproxy API returned a proxy that is not an object: {data!r}")
        toxics: list[Toxic] = []
        for item in data.get("toxics") or []:
            try:
                toxics.append(toxic_from_json(item))
            except ToxicError:  # a toxic type mqbench does not know (real Toxiproxy has more)
                toxics.append(
                    Toxic(
                        str(item.get("name")),
                        str(item.get("type")),
                        str(item.get("stream", DOWNSTREAM)),
                        float(item.get("toxicity", 1.0)),
                        dict(item.get("attributes") or {}),
                    )
                )
        return cls(
            name=str(data["name"]),
            listen=str(data["listen"]),
            upstream=str(data["upstream"]),
            enabled=bool(data.get("enabled", True)),
            toxics=tuple(toxics),
        )


def check_url(url: str) -> str:
    """``url`` without a trailing slash if it is ``http://host:port``; ``ScenarioError`` if not."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
        raise ScenarioError(f"Toxiproxy URL must look like http://host:port, got {url!r}")
    try:
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise ScenarioError(f"Toxiproxy URL has a bad port: {url!r}") from None
    return url.rstrip("/")


class ToxiproxyClient:
    """Synchronous Toxiproxy API client with a timeout on every request."""

    def __init__(self, url: str = DEFAULT_URL, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Talk to the API at ``url`` (``http://host:port``)."""
        self.url = check_url(url)
        self.timeout_s = timeout_s
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    # -- transport ----------------------------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        status, raw, _ = self._exchange(method, path, body)
        return status, raw

    def _exchange(
        self, method: str, path: str, body: Any = None
    ) -> tuple[int, bytes, dict[str, str]]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                headers = {k.lower(): v for k, v in response.headers.items()}
                return int(response.status), bytes(response.read()), headers
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            exc.close()
            message = raw.decode("utf-8", "replace").strip()
            try:
                parsed = json.loads(raw)
                if isinstance(parsed, Mapping) and "error" in parsed:
                    message = str(parsed["error"])
            except ValueError:
                pass
            raise ToxiproxyApiError(
                exc.code, f"Toxiproxy at {self.url}: {method} {path} failed ({exc.code}): {message}"
            ) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ToxiproxyUnreachable(
                f"Toxiproxy API at {self.url} did not answer within {self.timeout_s:g} s: {reason}"
            ) from None

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        _, raw = self._request(method, path, body)
        try:
            return json.loads(raw)
        except ValueError:
            raise FaultError(
                f"Toxiproxy at {self.url}: {method} {path} returned non-JSON: {raw[:100]!r}"
            ) from None

    @staticmethod
    def _p(name: str) -> str:
        return quote(name, safe="")

    # -- server -------------------------------------------------------------------------

    def version(self) -> str:
        """The server's version, e.g. ``2.12.0`` (``ToxiproxyUnreachable`` if it is silent).

        Toxiproxy 2.7+ answers ``{"version": "..."}``, older ones the bare text; both work.
        """
        _, raw = self._request("GET", "/version")
        text = raw.decode("utf-8", "replace").strip()
        try:
            parsed = json.loads(text)
        except ValueError:
            return text
        if isinstance(parsed, Mapping) and "version" in parsed:
            return str(parsed["version"])
        return text

    def check(self) -> str:
        """Fail fast unless a Toxiproxy API answers at the URL; return its version."""
        return self.version()

    def is_builtin(self) -> bool:
        """True when the server is mqbench's own proxy (it has the event log).

        Both answer ``/version`` alike; the built-in one adds ``Server: mqbench-proxy/...``.
        """
        _, _, headers = self._exchange("GET", "/version")
        return headers.get("server", "").startswith("mqbench-proxy/")

    def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        self._request("POST", "/reset")

    # -- proxies ------------------------------------------------------------------------

    def proxies(self) -> dict[str, ProxyInfo]:
        """Every proxy, by name."""
        data = self._json("GET", "/proxies")
        if not isinstance(data, Mapping):
            raise FaultError(f"Toxiproxy at {self.url}: GET /proxies did not return an object")
        return {str(name): ProxyInfo.from_json(value) for name, value in data.items()}

    def get_proxy(self, name: str) -> ProxyInfo:
        """Proxy ``name`` (``ToxiproxyApiError`` 404 when missing)."""
        return ProxyInfo.from_json(self._json("GET", f"/proxies/{self._p(name)}"))

    def create_proxy(
        self, name: str, upstream: str, *, listen: str = "127.0.0.1:0", enabled: bool = True
    ) -> ProxyInfo:
        """Create a proxy (``listen`` port 0: the server picks one; see ``listen_port``)."""
        body = {"name": name, "upstream": upstream, "listen": listen, "enabled": enabled}
        return ProxyInfo.from_json(self._json("POST", "/proxies", body))

    def update_proxy(
        self,
        name: str,
        *,
        listen: str | None = None,
        upstream: str | None = None,
        enabled: bool | None = None,
    ) -> ProxyInfo:
        """Change a proxy's listen address, upstream or enabled flag."""
        body = {
            k: v
            for k, v in (("listen", listen), ("upstream", upstream), ("enabled", enabled))
            if v is not None
        }
        return ProxyInfo.from_json(self._json("POST", f"/proxies/{self._p(name)}", body))

    def enable(self, name: str) -> ProxyInfo:
        """Enable a proxy (it listens again)."""
        return self.update_proxy(name, enabled=True)

    def disable(self, name: str) -> ProxyInfo:
        """Disable a proxy: it stops listening and drops its connections."""
        return self.update_proxy(name, enabled=False)

    def delete_proxy(self, name: str, *, missing_ok: bool = False) -> None:
        """Delete a proxy (a missing one is an error unless ``missing_ok``)."""
        try:
            self._request("DELETE", f"/proxies/{self._p(name)}")
        except ToxiproxyApiError as exc:
            if not (missing_ok and exc.status == 404):
                raise

    # -- toxics -------------------------------------------------------------------------

    def toxics(self, proxy: str) -> list[Toxic]:
        """The toxics of ``proxy``."""
        data = self._json("GET", f"/proxies/{self._p(proxy)}/toxics")
        if not isinstance(data, list):
            raise FaultError(f"Toxiproxy at {self.url}: toxics of {proxy!r} are not a list")
        return list(
            ProxyInfo.from_json(
                {"name": proxy, "listen": ":0", "upstream": ":0", "toxics": data}
            ).toxics
        )

    def add_toxic(
        self,
        proxy: str,
        toxic_type: str,
        attributes: Mapping[str, object] | None = None,
        *,
        stream: str = DOWNSTREAM,
        toxicity: float = 1.0,
        name: str | None = None,
    ) -> Toxic:
        """Validate and add a toxic (``ToxicError`` before any request when it is bad)."""
        toxic = validate_toxic(toxic_type, attributes, stream=stream, toxicity=toxicity, name=name)
        return self.add(proxy, toxic)

    def add(self, proxy: str, toxic: Toxic) -> Toxic:
        """Add an already validated toxic; return it as the server stored it."""
        data = self._json("POST", f"/proxies/{self._p(proxy)}/toxics", toxic.to_json())
        try:
            return toxic_from_json(data)
        except ToxicError:
            return toxic

    def update_toxic(
        self,
        proxy: str,
        name: str,
        *,
        attributes: Mapping[str, object] | None = None,
        toxicity: float | None = None,
    ) -> Toxic:
        """Change a toxic's attributes (merged) or toxicity."""
        body: dict[str, Any] = {}
        if attributes is not None:
            body["attributes"] = dict(attributes)
        if toxicity is not None:
            body["toxicity"] = toxicity
        data = self._json("POST", f"/proxies/{self._p(proxy)}/toxics/{self._p(name)}", body)
        return toxic_from_json(data)

    def remove_toxic(self, proxy: str, name: str, *, missing_ok: bool = False) -> None:
        """Remove a toxic (a missing one is an error unless ``missing_ok``)."""
        try:
            self._request("DELETE", f"/proxies/{self._p(proxy)}/toxics/{self._p(name)}")
        except ToxiproxyApiError as exc:
            if not (missing_ok and exc.status == 404):
                raise

    # -- mqbench extensions -------------------------------------------------------------

    def events(self, proxy: str | None = None, *, since: int = 0) -> list[dict[str, Any]]:
        """The built-in proxy's event log (of one proxy, or all), events after seq ``since``.

        A real Toxiproxy has no event log: it answers 404, raised as ``ToxiproxyApiError``.
        """
        path = "/events" if proxy is None else f"/proxies/{self._p(proxy)}/events"
        data = self._json("GET", f"{path}?since={int(since)}")
        if not isinstance(data, list):
            raise FaultError(f"Toxiproxy at {self.url}: {path} did not return a list")
        return [dict(e) for e in data]

    def connections(self, proxy: str) -> list[dict[str, Any]]:
        """The built-in proxy's live connections of ``proxy`` (404 on a real Toxiproxy)."""
        data = self._json("GET", f"/proxies/{self._p(proxy)}/connections")
        if not isinstance(data, list):
            raise FaultError(f"Toxiproxy at {self.url}: connections did not return a list")
        return [dict(c) for c in data]


class AsyncToxiproxyClient:
    """``ToxiproxyClient``'s calls run in a worker thread, awaitable from an event loop."""

    def __init__(self, url: str = DEFAULT_URL, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Talk to the API at ``url``."""
        self.sync = ToxiproxyClient(url, timeout_s=timeout_s)

    async def check(self) -> str:
        """See ``ToxiproxyClient.check``."""
        return await asyncio.to_thread(self.sync.check)

    async def reset(self) -> None:
        """See ``ToxiproxyClient.reset``."""
        await asyncio.to_thread(self.sync.reset)

    async def proxies(self) -> dict[str, ProxyInfo]:
        """See ``ToxiproxyClient.proxies``."""
        return await asyncio.to_thread(self.sync.proxies)

    async def create_proxy(
        self, name: str, upstream: str, *, listen: str = "127.0.0.1:0", enabled: bool = True
    ) -> ProxyInfo:
        """See ``ToxiproxyClient.create_proxy``."""
        return await asyncio.to_thread(
            self.sync.create_proxy, name, upstream, listen=listen, enabled=enabled
        )

    async def update_proxy(
        self,
        name: str,
        *,
        listen: str | None = None,
        upstream: str | None = None,
        enabled: bool | None = None,
    ) -> ProxyInfo:
        """See ``ToxiproxyClient.update_proxy``."""
        return await asyncio.to_thread(
            self.sync.update_proxy, name, listen=listen, upstream=upstream, enabled=enabled
        )

    async def delete_proxy(self, name: str, *, missing_ok: bool = False) -> None:
        """See ``ToxiproxyClient.delete_proxy``."""
        await asyncio.to_thread(self.sync.delete_proxy, name, missing_ok=missing_ok)

    async def add(self, proxy: str, toxic: Toxic) -> Toxic:
        """See ``ToxiproxyClient.add``."""
        return await asyncio.to_thread(self.sync.add, proxy, toxic)

    async def remove_toxic(self, proxy: str, name: str, *, missing_ok: bool = False) -> None:
        """See ``ToxiproxyClient.remove_toxic``."""
        await asyncio.to_thread(self.sync.remove_toxic, proxy, name, missing_ok=missing_ok)

    async def events(self, proxy: str | None = None, *, since: int = 0) -> list[dict[str, Any]]:
        """See ``ToxiproxyClient.events``."""
        return await asyncio.to_thread(self.sync.events, proxy, since=since)
