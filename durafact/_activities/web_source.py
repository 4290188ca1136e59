"""`WebSource`: web search through a SearxNG-style endpoint (or over registered URLs)
and lazy, guarded page fetches.

Search never fetches a page: it returns refs (URL, title, snippet). A page is
fetched only by `resolve`, once a recipe decided it needs it, and the fetch is
guarded, because the URL comes from a search engine or a model, not from the
operator:

- only `http` and `https`; redirects are followed by hand (at most
  `max_redirects`), each hop checked like the first URL, and more strictly:
  `allow_private` lets the first URL reach any address, but a redirect may lead to a
  non-global address only when it is in `allowed_networks` or is an address and port
  the first URL already reached (the same server), so an allowed local server cannot
  send the fetch on to 169.254.169.254 or another internal host;
- the host is resolved (`getaddrinfo`) and **every** address it resolves to must be
  global: loopback, private (RFC 1918, ULA), link-local (incl. 169.254.169.254, the
  cloud metadata address), shared (100.64/10), multicast, unspecified and reserved
  addresses are refused, also when hidden inside an IPv6 address (IPv4-mapped,
  6to4, Teredo, NAT64), unless `allow_private=True` (no address check at all) or
  the address is in one of `allowed_networks`;
- the connection goes to the address that was checked (the URL's host is replaced by
  that IP; the `Host` header and, for https, the TLS server name and certificate
  check keep the original name), so a DNS answer that changes between check and
  connect (DNS rebinding) cannot redirect the fetch to an internal address;
- a timeout for the whole fetch, all hops included; a size cap (the body is
  streamed and reading stops at `max_bytes` of **decompressed** bytes: only gzip
  and deflate are accepted, decompressed here a piece at a time, so a compressed
  bomb stops at the cap); only `text/html`,
  `application/xhtml+xml` and `text/plain` are accepted;
- HTML becomes readable text with the standard library's `html.parser`: scripts,
  styles and other non-text elements dropped, the title first, paragraph breaks kept.

The search endpoint itself is operator configuration (often a SearxNG container on
a private network), so it is not address-checked; the result URLs are. A client
passed as `client` is used for the search endpoint only: page fetches use a fresh
client per hop with `trust_env=False` (no proxy from the environment, which would
connect on its own terms).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import socket
import ssl
import zlib
from collections.abc import Iterable, Mapping
from html.parser import HTMLParser
from typing import Any

import httpx
from pydantic import BaseModel

from durafact._activities.llm import retry_after
from durafact._core.sources import (
    ContentTooLarge,
    DocumentNotFound,
    RefusedLocation,
    SourceError,
    SourceRef,
    SourceUnavailable,
    UnsupportedContent,
    check_limit,
    check_ref,
    preview,
    ranked,
)
from durafact._core.text import keyword_score

DEFAULT_TIMEOUT = 15.0
DEFAULT_MAX_BYTES = 2_000_000
DEFAULT_MAX_REDIRECTS = 5
USER_AGENT = "durafact-websource/0.2 (+https://github.com/durafact)"
TEXT_TYPES = {"text/html": "html", "application/xhtml+xml": "html", "text/plain": "text"}
_REDIRECTS = {301, 302, 303, 307, 308}
_RETRYABLE_STATUS = {408, 425, 429}
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
ACCEPT_ENCODING = "gzip, deflate"  # what `_Decompressor` reads, counting its output
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)


class RegisteredPage(BaseModel):
    """A URL known in advance, searched by its title and description (never fetched
    at search time)."""

    url: str
    title: str = ""
    description: str = ""


def _page(item: str | tuple[str, ...] | Mapping[str, str] | RegisteredPage) -> RegisteredPage:
    if isinstance(item, RegisteredPage):
        return item
    if isinstance(item, str):
        return RegisteredPage(url=item)
    if isinstance(item, Mapping):
        return RegisteredPage.model_validate(item)
    if isinstance(item, tuple) and 1 <= len(item) <= 3:
        return RegisteredPage(**dict(zip(("url", "title", "description"), item, strict=False)))
    raise SourceError(f"a registered URL is a str, (url, title, description) or a dict: {item!r}")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_refusal(address: str) -> str | None:
    """Why `address` is not a public internet address (e.g. "loopback"), or None if it is."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_ipv4(ip)
        if inner is not None:
            reason = address_refusal(str(inner))
            if reason:
                return f"{reason} (inside {ip})"
    # Most specific first: is_private also covers loopback, link-local and more. IPv6
    # site-local (fec0::/10, deprecated but still routed inside networks) is not in the
    # standard library's private list, so it is asked for by name.
    kinds = ("loopback", "link_local", "site_local", "multicast", "unspecified", "reserved")
    for name in (*kinds, "private"):
        if getattr(ip, f"is_{name}", False):
            return name.replace("_", "-")
    if not ip.is_global:
        return "not globally routable"
    return None


class _TextExtractor(HTMLParser):
    """Readable text of an HTML page: title, then text with paragraph breaks."""

    SKIP = frozenset(
        {"script", "style", "noscript", "template", "svg", "math", "iframe", "object", "canvas"}
    )
    BLOCK = frozenset(
        """address article aside blockquote body caption dd details dialog div dl dt fieldset
        figcaption figure footer form h1 h2 h3 h4 h5 h6 header hr html legend main nav ol p
        pre section summary table tbody thead tfoot tr ul""".split()  # noqa: SIM905
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._skip = 0
        self._in_title = False
        self._pre = 0
        self.title_parts: list[str] = []
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag == "br":
            self.parts.append("\n")
        elif tag == "li":
            self.parts.append("\n- ")
        elif tag in ("td", "th"):
            self.parts.append(" ")
        elif tag in self.BLOCK:
            self.parts.append("\n\n")
            if tag == "pre":
                self._pre += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag == "title":
            self._in_title = False
        elif tag in self.BLOCK:
            self.parts.append("\n\n")
            if tag == "pre":
                self._pre = max(0, self._pre - 1)

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._in_title:
            self.title_parts.append(data)
        elif self._pre:
            self.parts.append(data.replace("\r\n", "\n"))
        else:
            self.parts.append(re.sub(r"\s+", " ", data))

    def text(self) -> str:
        lines = [" ".join(line.split()) for line in "".join(self.parts).split("\n")]
        body = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
        title = " ".join("".join(self.title_parts).split())
        if title and not body.startswith(title):
            return f"{title}\n\n{body}" if body else title
        return body


def html_to_text(html: str) -> str:
    """Readable text of an HTML document (stdlib `html.parser`, no network, no JS)."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    return parser.text()


def _decode(data: bytes, charset: str | None, kind: str) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8", "replace")
    if not charset and kind == "html":
        found = _META_CHARSET.search(data[:4096])
        charset = found.group(1).decode("ascii") if found else None
    try:
        return data.decode(charset or "utf-8", "replace")
    except LookupError:  # an unknown charset name
        return data.decode("utf-8", "replace")


class WebSource:
    """Web search and lazily fetched pages (see the module doc for the fetch guards).

    `search` asks `search_endpoint` (SearxNG's JSON API: `GET {endpoint}?q=...&
    format=json` answering `{"results": [{"url", "title", "content", "score"?}]}`)
    or, without an endpoint, keyword-matches the registered `urls` (strings,
    `(url, title, description)` tuples, dicts or `RegisteredPage`s) by title and
    description. A ref's `uid` is the URL (without fragment), its `payload` the
    snippet, `metadata` the title and rank. Scores: an endpoint's own scores divided
    by the best one (so the top result scores 1.0), or `1 / (1 + rank)` when the
    endpoint gives none; registered pages score by `keyword_score`.

    `resolve` fetches the page and returns its readable text.
    """

    def __init__(
        self,
        source_id: str = "web",
        search_endpoint: str | None = None,
        urls: Iterable[str | tuple[str, ...] | Mapping[str, str] | RegisteredPage] = (),
        allow_private: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        client: httpx.AsyncClient | None = None,
        *,
        allowed_networks: Iterable[str] = (),
        max_redirects: int = DEFAULT_MAX_REDIRECTS,
        use_stems: bool = True,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.source_id = source_id
        self.search_endpoint = search_endpoint
        self.pages = [_page(item) for item in urls]
        if not search_endpoint and not self.pages:
            raise SourceError(f"source {source_id!r}: give a search_endpoint or registered urls")
        if search_endpoint and httpx.URL(search_endpoint).scheme not in ("http", "https"):
            raise SourceError(f"search_endpoint must be an http(s) URL: {search_endpoint!r}")
        self.allow_private = allow_private
        try:
            self.allowed_networks = tuple(ipaddress.ip_network(n) for n in allowed_networks)
        except ValueError as exc:
            raise SourceError(f"allowed_networks: {exc}") from exc
        if timeout <= 0 or max_bytes <= 0 or max_redirects < 0:
            raise SourceError("timeout and max_bytes must be positive, max_redirects >= 0")
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.max_redirects = max_redirects
        self.client = client
        self.use_stems = use_stems
        self.user_agent = user_agent
        self._ssl_context: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        where = self.search_endpoint or f"{len(self.pages)} registered URLs"
        return f"WebSource({where!r}, source_id={self.source_id!r})"

    # -- search --------------------------------------------------------------------

    async def search(self, query: str, limit: int = 5) -> list[SourceRef]:
        check_limit(limit)
        if self.search_endpoint:
            return await self._search_endpoint(query, limit)
        refs = []
        for page in self.pages:
            score = keyword_score(f"{page.title}\n{page.description}", query, self.use_stems)
            if score > 0:
                refs.append(
                    SourceRef(
                        source_id=self.source_id,
                        uid=_without_fragment(page.url),
                        payload=preview(page.description or page.title or page.url),
                        score=score,
                        query=query,
                        metadata={"title": page.title},
                    )
                )
        return ranked(refs, limit)

    async def _search_endpoint(self, query: str, limit: int) -> list[SourceRef]:
        assert self.search_endpoint is not None
        where = f"source {self.source_id!r}: search endpoint {self.search_endpoint}"
        params = {"q": query, "format": "json"}
        headers = {
            "Accept": "application/json",
            "Accept-Encoding": ACCEPT_ENCODING,
            "User-Agent": self.user_agent,
        }
        client = self.client or httpx.AsyncClient(timeout=self.timeout)
        try:
            async with asyncio.timeout(self.timeout):
                async with client.stream(
                    "GET", self.search_endpoint, params=params, headers=headers
                ) as response:
                    _check_status(response, where)
                    data = await _read_capped(response, self.max_bytes, where)
        except TimeoutError:
            raise SourceUnavailable(f"{where}: no answer within {self.timeout}s") from None
        except httpx.HTTPError as exc:
            raise SourceUnavailable(f"{where}: {type(exc).__name__}: {exc}") from exc
        finally:
            if self.client is None:
                await client.aclose()
        try:
            body = json.loads(data)
        except (ValueError, RecursionError):
            raise SourceError(
                f"{where}: the answer is not JSON (is 'json' among SearxNG's search.formats?)"
            ) from None
        results = body.get("results") if isinstance(body, dict) else None
        if not isinstance(results, list):
            raise SourceError(f"{where}: the answer has no 'results' list")
        return _endpoint_refs(self.source_id, query, results, limit)

    # -- resolve -------------------------------------------------------------------

    async def resolve(self, ref: SourceRef) -> str:
        check_ref(self.source_id, ref)
        try:
            async with asyncio.timeout(self.timeout):
                return await self._fetch(ref.uid)
        except TimeoutError:
            raise SourceUnavailable(
                f"source {self.source_id!r}: fetching {ref.uid} took longer than {self.timeout}s"
            ) from None

    async def _fetch(self, start: str) -> str:
        url = self._parse(start)
        reached: set[tuple[str, int]] | None = None  # the first URL's addresses and port
        for _ in range(self.max_redirects + 1):
            where = f"source {self.source_id!r}: {url}"
            addresses = await self.check_url(url, first=reached)
            if reached is None:
                reached = {(address, _port(url)) for address in addresses}
            async with self._page_client() as client:
                response = await self._connect(client, url, addresses, where)
                try:
                    if response.status_code in _REDIRECTS:
                        location = response.headers.get("location")
                        if not location:
                            raise SourceError(f"{where}: redirect without a Location")
                        url = self._parse(str(url.join(location)))
                        continue
                    _check_status(response, where)
                    mime, _, _ = response.headers.get("content-type", "").partition(";")
                    kind = TEXT_TYPES.get(mime.strip().lower())
                    if kind is None:
                        raise UnsupportedContent(
                            f"{where}: content type {mime.strip() or '(none)'!r} refused;"
                            f" only {', '.join(TEXT_TYPES)} are read"
                        )
                    data = await _read_capped(response, self.max_bytes, where)
                except httpx.HTTPError as exc:
                    raise SourceUnavailable(f"{where}: {type(exc).__name__}: {exc}") from exc
                finally:
                    await response.aclose()
            text = _decode(data, response.charset_encoding, kind)
            return html_to_text(text) if kind == "html" else text.replace("\r\n", "\n")
        raise SourceError(f"source {self.source_id!r}: more than {self.max_redirects} redirects")

    def _parse(self, raw: str) -> httpx.URL:
        try:
            url = httpx.URL(raw)
        except httpx.InvalidURL as exc:
            raise RefusedLocation(f"source {self.source_id!r}: invalid URL {raw!r}: {exc}") from exc
        if url.scheme not in ("http", "https"):
            raise RefusedLocation(
                f"source {self.source_id!r}: refused {raw!r}: only http and https URLs are fetched"
            )
        if not url.host:
            raise RefusedLocation(f"source {self.source_id!r}: refused {raw!r}: no host")
        return url.copy_with(fragment=None)

    async def check_url(
        self, url: httpx.URL, first: set[tuple[str, int]] | None = None
    ) -> list[str]:
        """The addresses `url`'s host resolves to, every one of them allowed, or
        `RefusedLocation` naming the first refused one.

        `first` is given for a redirect hop: the addresses (and port) the first URL
        reached. Then `allow_private` does not apply: a non-global address must be in
        `allowed_networks` or be one of those, on the same port."""
        host = url.raw_host.decode("ascii")
        port = _port(url)
        try:
            ipaddress.ip_address(host)
            addresses = [host]
        except ValueError:
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM
                )
            except socket.gaierror as exc:
                raise SourceError(
                    f"source {self.source_id!r}: cannot resolve {host}: {exc.strerror}",
                    retryable=exc.errno == socket.EAI_AGAIN,
                ) from exc
            addresses = list(dict.fromkeys(str(info[4][0]).split("%", 1)[0] for info in infos))
        if not addresses:
            raise SourceError(f"source {self.source_id!r}: {host} resolves to no address")
        if self.allow_private and first is None:
            return addresses
        for address in addresses:
            ip = ipaddress.ip_address(address)
            if any(ip in network for network in self.allowed_networks):
                continue
            if first is not None and (address, port) in first:
                continue  # a redirect to the server the first URL reached
            reason = address_refusal(address)
            if reason:
                shown = host if host == address else f"{host} (resolves to {address})"
                if first is None:
                    raise RefusedLocation(
                        f"source {self.source_id!r}: refused {url}: {shown} is a {reason}"
                        " address; pass allow_private=True or allowed_networks to allow it"
                    )
                raise RefusedLocation(
                    f"source {self.source_id!r}: refused a redirect to {url}: {shown} is a "
                    f"{reason} address; a redirect reaches one only in allowed_networks "
                    "(--allow-network CIDR), whatever allow_private says"
                )
        return addresses

    def _page_client(self) -> httpx.AsyncClient:
        # One client per hop: its connection pool is keyed by IP, so a pooled TLS
        # connection can never be reused for another host name on the same address.
        if self._ssl_context is None:  # made once: loading the trust store is not free
            self._ssl_context = httpx.create_ssl_context(trust_env=False)
        return httpx.AsyncClient(
            timeout=self.timeout, trust_env=False, follow_redirects=False, verify=self._ssl_context
        )

    async def _connect(
        self, client: httpx.AsyncClient, url: httpx.URL, addresses: list[str], where: str
    ) -> httpx.Response:
        """Send the request to the first checked address that accepts a connection."""
        host_header = url.netloc.decode("ascii")
        extensions = {"sni_hostname": url.raw_host.decode("ascii")} if url.scheme == "https" else {}
        headers = {
            "Host": host_header,
            "User-Agent": self.user_agent,
            "Accept": "text/html, application/xhtml+xml, text/plain;q=0.9",
            "Accept-Encoding": ACCEPT_ENCODING,
        }
        failure: Exception | None = None
        for address in addresses:
            request = client.build_request(
                "GET", url.copy_with(host=address), headers=headers, extensions=extensions
            )
            try:
                return await client.send(request, stream=True)
            except httpx.ConnectError as exc:
                failure = exc
            except httpx.TimeoutException as exc:
                raise SourceUnavailable(f"{where}: timed out: {exc}") from exc
            except httpx.HTTPError as exc:
                raise SourceUnavailable(f"{where}: {type(exc).__name__}: {exc}") from exc
        raise SourceUnavailable(f"{where}: cannot connect: {failure}")


def _port(url: httpx.URL) -> int:
    return url.port or (443 if url.scheme == "https" else 80)


def _without_fragment(url: str) -> str:
    return url.split("#", 1)[0]


def _check_status(response: httpx.Response, where: str) -> None:
    status = response.status_code
    if status < 400:
        return
    if status in (404, 410):
        raise DocumentNotFound(f"{where}: HTTP {status}")
    if status in _RETRYABLE_STATUS or status >= 500:
        raise SourceUnavailable(
            f"{where}: HTTP {status}", retry_after=retry_after(response.headers)
        )
    raise SourceError(f"{where}: HTTP {status}")


async def _read_capped(response: httpx.Response, max_bytes: int, where: str) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise ContentTooLarge(f"{where}: {declared} bytes declared, the cap is {max_bytes}")
    decompressor = _Decompressor(response.headers.get("content-encoding", ""), where)
    data = bytearray()
    too_large = ContentTooLarge(f"{where}: more than {max_bytes} bytes; stopped reading")
    async for chunk in response.aiter_raw():
        # At most one byte past the cap comes out of a compressed chunk, however
        # much it would inflate to.
        data += decompressor.feed(chunk, max_bytes + 1 - len(data))
        if len(data) > max_bytes:
            raise too_large
    data += decompressor.flush(max_bytes + 1 - len(data))
    if len(data) > max_bytes:
        raise too_large
    return bytes(data)


class _Decompressor:
    """A body's `Content-Encoding` undone piece by piece, each piece no larger than
    asked: identity, gzip or deflate; anything else is refused."""

    def __init__(self, encoding: str, where: str) -> None:
        self.where = where
        self.name = encoding.strip().lower()
        if self.name in ("", "identity"):
            self._inflate = None
        elif self.name in ("gzip", "x-gzip", "deflate"):
            # 32 + 15: a gzip or zlib header, whichever it is; raw deflate on failure.
            self._inflate = zlib.decompressobj(32 + zlib.MAX_WBITS)
        else:
            raise UnsupportedContent(
                f"{where}: content encoding {encoding!r} refused; only gzip and deflate"
            )
        self._started = False
        self._pending = b""

    def feed(self, chunk: bytes, room: int) -> bytes:
        if self._inflate is None:
            return chunk
        try:
            out = self._inflate.decompress(self._pending + chunk, room)
        except zlib.error as exc:
            if self.name == "deflate" and not self._started:
                self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate
                self._started = True
                return self.feed(chunk, room)
            raise SourceError(f"{self.where}: a broken {self.name} body: {exc}") from None
        self._started = True
        # What did not fit stays for the next call (only when the cap was reached).
        self._pending = self._inflate.unconsumed_tail
        return out

    def flush(self, room: int) -> bytes:
        if self._inflate is None:
            return b""
        if self._pending:
            return self.feed(b"", room)
        return self._inflate.flush()


def _endpoint_refs(source_id: str, query: str, results: list[Any], limit: int) -> list[SourceRef]:
    kept: dict[str, dict[str, Any]] = {}
    for item in results:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            continue
        url = _without_fragment(item["url"].strip())
        if not url.lower().startswith(("http://", "https://")) or url in kept:
            continue
        kept[url] = item
    scores = [item.get("score") for item in kept.values()]
    numeric = all(isinstance(s, int | float) and not isinstance(s, bool) and s > 0 for s in scores)
    best = max(scores) if numeric and scores else 1.0
    refs = []
    for rank, (url, item) in enumerate(kept.items()):
        title = str(item.get("title") or "")
        content = str(item.get("content") or "")
        metadata: dict[str, Any] = {"title": title, "rank": rank}
        if numeric:
            metadata["engine_score"] = item["score"]
        if isinstance(item.get("engine"), str):
            metadata["engine"] = item["engine"]
        refs.append(
            SourceRef(
                source_id=source_id,
                uid=url,
                payload=preview(content or title or url),
                score=item["score"] / best if numeric else 1 / (1 + rank),
                query=query,
                metadata=metadata,
            )
        )
    return ranked(refs, limit)
