"""Which sites may use the API: the host a request names, and, for a change, the page
that sends it. Checked by `Guard` (security.py) on every request, before any route.

- **DNS rebinding.** A page of `evil.example`, whose name then comes to resolve to
  127.0.0.1, reaches this server as its own origin: the browser lets it read and send
  anything. Only the `Host` header still names the site the page is on, so a request
  must name this server: `localhost`, `127.0.0.1`, `[::1]`, the address it is served
  on or the one the connection came to, each with the server's port; or a host the
  person serving allowed (`--allow-host`, `DURAFACT_API_ALLOW_HOSTS`), as written.
- **Cross-site requests.** A page on another origin cannot read the answers, but can
  still send an HTML form or a `no-cors` fetch. A change (any method but GET and HEAD)
  must come from no page or from this server's own (`Origin`, by the rules above;
  `Sec-Fetch-Site`), and carry `Content-Type: application/json` or `X-Durafact: 1`:
  a page may send neither to another origin without a CORS preflight, which this
  server never grants.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.types import Scope

from durafact._api.errors import ApiError

ALLOW_HOSTS_ENV = "DURAFACT_API_ALLOW_HOSTS"
CLIENT_HEADER = "x-durafact"  # `X-Durafact: 1`, what the console sends with a change
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
READS = frozenset({"GET", "HEAD"})
# What the browser says of a page and the request it sends: `same-origin`, or `none`
# (the person typed it). `same-site` is refused too: on loopback it is another port,
# another program's page.
OWN_FETCHES = frozenset({"same-origin", "none"})
# A host as a Host header names it: a name or an address, and a port unless it is the
# scheme's default. Nothing else (a user name, a path) may come with it.
HOST = re.compile(
    r"(?P<name>\[[0-9a-f:.]+\]|[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)(?::(?P<port>[0-9]{1,5}))?", re.I
)


def allowed_hosts(given: Iterable[str], env_value: str | None) -> tuple[str, ...]:
    """The `--allow-host` values and the env var's comma-separated ones, lowercased; a
    ValueError, saying what is wrong, for one that is not a host."""
    hosts = [*given, *(env_value or "").split(",")]
    found = [host.strip().lower() for host in hosts if host.strip()]
    for host in found:
        if not HOST.fullmatch(host):
            raise ValueError(
                f"allowed host {host!r} is not a host: a name or an address, with :PORT "
                "when it is not the scheme's default (durafact.example.com, 10.0.0.5:8000)"
            )
    return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class Sites:
    """This server's own names: `bound`, the address it is served on (None: only the
    loopback names and the connection's address), and `allowed`, hosts as written."""

    bound: str | None = None
    allowed: tuple[str, ...] = ()

    def names_us(self, host: str, scope: Scope) -> bool:
        """Whether `host` (`name[:port]`, a Host header or an origin's) is this server."""
        return host.lower() in self.own_hosts(scope)

    def own_hosts(self, scope: Scope) -> set[str]:
        """This server's hosts for a request: each of its names with the port the request
        came to (alone too when that is 80, as browsers write it), and the allowed hosts
        as written."""
        local, port = scope.get("server") or (None, None)
        unported = [host for host in self.allowed if port_of(host) is None]
        names = {*LOOPBACK_NAMES, *unported, *bracketed(local), *bracketed(self.bound)}
        own = {f"{name}:{port}" for name in names} if port is not None else set()
        if port == 80:
            own |= names
        return own | set(self.allowed)

    def refusal(self, scope: Scope) -> ApiError | None:
        """Why the request must not go on; None when it may."""
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        if not self.names_us(host, scope):
            # 421 Misdirected Request (RFC 9110, 15.5.20): this server does not answer
            # for that host. The request was fine, it reached the wrong server.
            return ApiError(
                421,
                "MisdirectedRequest",
                f"Host {host!r} is not this server's: a page of another site that resolves "
                "to this address is refused (allow the name with `durafact serve "
                f"--allow-host NAME` or {ALLOW_HOSTS_ENV} if it is yours)",
            )
        if scope["method"] in READS:
            return None
        problem = self.cross_site(headers, scope)
        # 403: the request is understood, and it is refused whoever sends it.
        return ApiError(403, "CrossSiteRequest", problem) if problem else None

    def cross_site(self, headers: dict[str, str], scope: Scope) -> str | None:
        """Why a change must not be taken from where it comes; None when it may."""
        origin = headers.get("origin")
        if origin is not None and not self.is_own_origin(origin, scope):
            return f"a change from the page of another site ({origin}) is refused"
        fetched = headers.get("sec-fetch-site")
        if fetched is not None and fetched not in OWN_FETCHES:
            return f"a change the browser says is {fetched} is refused"
        if content_type(headers) != "application/json" and headers.get(CLIENT_HEADER) != "1":
            return (
                "a change needs `Content-Type: application/json` or `X-Durafact: 1`, which a "
                "page of another site cannot send"
            )
        return None

    def is_own_origin(self, origin: str, scope: Scope) -> bool:
        scheme, separator, host = origin.partition("://")
        return bool(separator) and scheme in ("http", "https") and self.names_us(host, scope)


def bracketed(address: str | None) -> list[str]:
    """An address as a host names it (an IPv6 one in brackets); none for None."""
    if not address:
        return []
    address = address.lower()
    return [f"[{address}]" if ":" in address and not address.startswith("[") else address]


def port_of(host: str) -> str | None:
    """The port a host names (`example.com:8443`), if it names one."""
    match = HOST.fullmatch(host)
    return match["port"] if match else None


def content_type(headers: dict[str, str]) -> str:
    """The media type alone, lowercased: `application/json; charset=utf-8` is JSON."""
    return headers.get("content-type", "").partition(";")[0].strip().lower()
