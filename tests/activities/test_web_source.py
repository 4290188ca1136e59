"""WebSource against a real HTTP server on loopback: a SearxNG-like search endpoint and
pages, with every request counted, so "search never fetches a page" and "resolve
fetches only the page asked for" are observed, not assumed."""

from __future__ import annotations

import contextlib
import gzip
import json
import threading
import time
import tracemalloc
import zlib
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from durafact._activities.web_source import WebSource, address_refusal, html_to_text
from durafact._core.sources import (
    ContentTooLarge,
    DocumentNotFound,
    RefusedLocation,
    SourceError,
    SourceRef,
    SourceUnavailable,
    UnsupportedContent,
)

# 64 MB of spaces, gzip-compressed to about 64 KB: a page that inflates a thousandfold.
BOMB = gzip.compress(b"<html><body>" + b" " * 64_000_000, compresslevel=9)

ARTICLE = """<!doctype html>
<html><head><title>Plaster  guide</title>
<style>body { color: red }</style>
<script>var secret = "do not show";</script>
</head>
<body>
<nav><a href="/">Home</a></nav>
<h1>Gypsum plaster</h1>
<p>Gypsum plaster sets in <b>about an hour</b>.</p>
<p>Mix it with clean
   water &amp; apply in thin layers.</p>
<ul><li>Trowel</li><li>Bucket</li></ul>
<noscript>enable javascript</noscript>
</body></html>
"""


class Site:
    """A loopback server: `/search` (SearxNG JSON) and pages, counting each path."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.hosts: list[str] = []
        self.queries: list[dict[str, list[str]]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def page_hits(self) -> int:
        return sum(count for path, count in self.hits.items() if path != "/search")

    def _results(self) -> list[dict[str, Any]]:
        return [
            {
                "url": f"{self.base}/pages/plaster#top",
                "title": "Plaster guide",
                "content": "Gypsum plaster sets in about an hour.",
                "score": 4.0,
                "engine": "local",
            },
            {
                "url": f"{self.base}/pages/notes",
                "title": "Notes",
                "content": "Plain notes about plaster.",
                "score": 2.0,
            },
            {"url": f"{self.base}/pages/plaster", "title": "duplicate", "score": 1.0},
            {"url": "ftp://example.org/file", "title": "not http", "score": 1.0},
            {"title": "no url at all"},
        ]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                path = parts.path
                site.hits[path] += 1
                site.hosts.append(self.headers.get("Host", ""))
                # The client may stop reading (the size cap): expected, not an error.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._route(path, parse_qs(parts.query))

            def _route(self, path: str, query: dict[str, list[str]]) -> None:
                if path == "/search":
                    site.queries.append(query)
                    results = site._results()
                    if query.get("q") == ["unscored"]:
                        results = [{k: v for k, v in r.items() if k != "score"} for r in results]
                    self._send(200, "application/json", json.dumps({"results": results}))
                elif path == "/pages/plaster":
                    self._send(200, "text/html; charset=utf-8", ARTICLE)
                elif path == "/pages/notes":
                    self._send(200, "text/plain; charset=utf-8", "Notes\r\nline two\r\n")
                elif path == "/pages/cp1251":
                    body = "<title>Цены</title><p>Штукатурка</p>".encode("cp1251")
                    self._send(200, "text/html; charset=windows-1251", body)
                elif path == "/pages/image":
                    self._send(200, "image/png", b"\x89PNG....")
                elif path == "/pages/untyped":
                    self._send(200, None, "no content type")
                elif path == "/pages/big":  # no Content-Length: the cap must stop the stream
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for _ in range(200):
                        self.wfile.write(b"x" * 65536)
                elif path == "/pages/declared-big":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(50_000_000))
                    self.end_headers()
                    self.wfile.write(b"x" * 1000)
                elif path == "/deep-search":
                    self._send(200, "application/json", "[" * 100_000 + "]" * 100_000)
                elif path == "/pages/bomb":
                    self._send(200, "text/html", BOMB, encoding="gzip")
                elif path == "/pages/gzipped":
                    self._send(200, "text/html", gzip.compress(ARTICLE.encode()), encoding="gzip")
                elif path == "/pages/deflated":
                    body = zlib.compress(ARTICLE.encode())
                    self._send(200, "text/html", body, encoding="deflate")
                elif path == "/pages/raw-deflated":
                    squeeze = zlib.compressobj(wbits=-zlib.MAX_WBITS)
                    body = squeeze.compress(ARTICLE.encode()) + squeeze.flush()
                    self._send(200, "text/html", body, encoding="deflate")
                elif path == "/pages/brotli":
                    self._send(200, "text/html", b"\x0b\x02\x80hi\x03", encoding="br")
                elif path == "/pages/slow":
                    time.sleep(3)
                    self._send(200, "text/plain", "late")
                elif path == "/pages/broken":
                    self._send(503, "text/plain", "try later")
                elif path == "/pages/secret":
                    self._send(200, "text/plain", "internal secret")
                elif path == "/redirect/page":
                    self._redirect("/pages/plaster")
                elif path == "/redirect/twice":
                    self._redirect(f"http://127.0.0.1:{site.port}/redirect/page")
                elif path == "/redirect/other-port":
                    self._redirect(f"http://127.0.0.1:{site.port + 1}/pages/secret")
                elif path == "/redirect/metadata":
                    self._redirect("http://169.254.169.254/latest/meta-data/")
                elif path == "/redirect/other-loopback":
                    self._redirect(f"http://127.0.0.2:{site.port}/pages/secret")
                elif path == "/redirect/file":
                    self._redirect("file:///etc/passwd")
                elif path == "/redirect/loop":
                    self._redirect("/redirect/loop")
                else:
                    self._send(404, "text/plain", "not found")

            def _redirect(self, location: str) -> None:
                self.send_response(302)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _send(
                self,
                status: int,
                content_type: str | None,
                body: str | bytes,
                encoding: str | None = None,
            ) -> None:
                data = body.encode() if isinstance(body, str) else body
                self.send_response(status)
                if content_type:
                    self.send_header("Content-Type", content_type)
                if encoding:
                    self.send_header("Content-Encoding", encoding)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


@pytest.fixture(scope="module")
def running_site() -> Iterator[Site]:
    site = Site()
    yield site
    site.stop()


@pytest.fixture
def site(running_site: Site) -> Site:
    running_site.hits.clear()
    running_site.hosts.clear()
    running_site.queries.clear()
    return running_site


def endpoint_source(site: Site, **kwargs: Any) -> WebSource:
    return WebSource(search_endpoint=f"{site.base}/search", allow_private=True, **kwargs)


def ref(url: str) -> SourceRef:
    return SourceRef(source_id="web", uid=url)


# -- search ------------------------------------------------------------------------------


async def test_endpoint_search_returns_refs_and_fetches_no_page(site: Site) -> None:
    refs = await endpoint_source(site).search("gypsum plaster", limit=5)
    assert [r.uid for r in refs] == [f"{site.base}/pages/plaster", f"{site.base}/pages/notes"]
    assert [r.score for r in refs] == [1.0, 0.5]  # the endpoint's scores over the best one
    assert refs[0].payload == "Gypsum plaster sets in about an hour."
    assert refs[0].metadata == {
        "title": "Plaster guide",
        "rank": 0,
        "engine_score": 4.0,
        "engine": "local",
    }
    assert site.queries == [{"q": ["gypsum plaster"], "format": ["json"]}]
    assert site.hits == Counter({"/search": 1})


async def test_endpoint_search_without_scores_ranks_by_position_and_respects_limit(
    site: Site,
) -> None:
    refs = await endpoint_source(site).search("unscored", limit=1)
    assert [(r.uid, r.score) for r in refs] == [(f"{site.base}/pages/plaster", 1.0)]


async def test_registered_urls_are_matched_by_title_and_description_without_requests(
    site: Site,
) -> None:
    source = WebSource(
        urls=[
            (f"{site.base}/pages/plaster", "Plaster guide", "How gypsum plaster sets"),
            {"url": f"{site.base}/pages/notes", "title": "Notes", "description": "Misc notes"},
            f"{site.base}/pages/secret",
        ],
        allow_private=True,
    )
    refs = await source.search("gypsum", limit=5)
    assert [r.uid for r in refs] == [f"{site.base}/pages/plaster"]
    assert refs[0].payload == "How gypsum plaster sets"
    assert await source.search("submarine") == []
    assert site.hits == Counter()


def test_a_web_source_needs_an_endpoint_or_urls() -> None:
    with pytest.raises(SourceError, match="search_endpoint or registered urls"):
        WebSource()


async def test_a_failing_search_endpoint_raises_a_clear_error(site: Site) -> None:
    missing = WebSource(search_endpoint=f"{site.base}/no-such-endpoint", allow_private=True)
    with pytest.raises(DocumentNotFound, match="HTTP 404"):
        await missing.search("plaster")
    not_json = WebSource(search_endpoint=f"{site.base}/pages/notes", allow_private=True)
    with pytest.raises(SourceError, match="not JSON"):
        await not_json.search("plaster")


# -- lazy resolve ------------------------------------------------------------------------------


async def test_resolve_fetches_only_the_page_asked_for(site: Site) -> None:
    source = endpoint_source(site)
    refs = await source.search("plaster", limit=5)
    text = await source.resolve(refs[1])
    assert text == "Notes\nline two\n"
    assert site.hits == Counter({"/search": 1, "/pages/notes": 1})


async def test_html_becomes_readable_text_with_title_and_paragraphs(site: Site) -> None:
    text = await endpoint_source(site).resolve(ref(f"{site.base}/pages/plaster"))
    assert text == (
        "Plaster guide\n\n"
        "Home\n\n"
        "Gypsum plaster\n\n"
        "Gypsum plaster sets in about an hour.\n\n"
        "Mix it with clean water & apply in thin layers.\n\n"
        "- Trowel\n"
        "- Bucket"
    )
    assert "secret" not in text and "color" not in text and "javascript" not in text


async def test_the_declared_charset_is_used_to_decode(site: Site) -> None:
    text = await endpoint_source(site).resolve(ref(f"{site.base}/pages/cp1251"))
    assert text == "Цены\n\nШтукатурка"


def test_html_to_text_keeps_preformatted_lines_and_drops_svg() -> None:
    html = "<p>Before</p><pre>a  b\nc</pre><svg><text>chart</text></svg><p>After<br>next</p>"
    assert html_to_text(html) == "Before\n\na b\nc\n\nAfter\nnext"


async def test_a_redirect_is_followed_and_each_hop_is_fetched_once(site: Site) -> None:
    text = await endpoint_source(site).resolve(ref(f"{site.base}/redirect/twice"))
    assert text.startswith("Plaster guide")
    assert site.hits == Counter({"/redirect/twice": 1, "/redirect/page": 1, "/pages/plaster": 1})


async def test_the_fetch_keeps_the_host_name_while_connecting_to_the_checked_address(
    site: Site,
) -> None:
    await endpoint_source(site).resolve(ref(f"http://localhost:{site.port}/pages/notes"))
    assert site.hosts == [f"localhost:{site.port}"]


async def test_a_page_over_the_size_cap_is_refused_after_reading_no_more_than_the_cap(
    site: Site,
) -> None:
    source = endpoint_source(site, max_bytes=100_000)
    started = time.monotonic()
    with pytest.raises(ContentTooLarge, match="more than 100000 bytes; stopped reading"):
        await source.resolve(ref(f"{site.base}/pages/big"))
    with pytest.raises(ContentTooLarge, match="50000000 bytes declared"):
        await source.resolve(ref(f"{site.base}/pages/declared-big"))
    assert time.monotonic() - started < 5


async def test_a_page_that_is_not_text_is_refused(site: Site) -> None:
    source = endpoint_source(site)
    with pytest.raises(UnsupportedContent, match="'image/png' refused"):
        await source.resolve(ref(f"{site.base}/pages/image"))
    with pytest.raises(UnsupportedContent, match=r"'\(none\)' refused"):
        await source.resolve(ref(f"{site.base}/pages/untyped"))


async def test_http_failures_say_whether_a_retry_may_help(site: Site) -> None:
    source = endpoint_source(site, timeout=1.0)
    with pytest.raises(DocumentNotFound, match="HTTP 404") as missing:
        await source.resolve(ref(f"{site.base}/pages/absent"))
    with pytest.raises(SourceUnavailable, match="HTTP 503") as broken:
        await source.resolve(ref(f"{site.base}/pages/broken"))
    with pytest.raises(SourceUnavailable, match="longer than 1.0s|timed out") as slow:
        await source.resolve(ref(f"{site.base}/pages/slow"))
    assert (missing.value.retryable, broken.value.retryable, slow.value.retryable) == (
        False,
        True,
        True,
    )


async def test_a_redirect_loop_stops_after_max_redirects(site: Site) -> None:
    source = endpoint_source(site, max_redirects=3)
    with pytest.raises(SourceError, match="more than 3 redirects"):
        await source.resolve(ref(f"{site.base}/redirect/loop"))
    assert site.hits["/redirect/loop"] == 4


# -- refused addresses ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/pages/secret",
        "http://localhost:{port}/pages/secret",
        "http://2130706433:{port}/pages/secret",  # 127.0.0.1 as one decimal number
        "http://[::1]:{port}/pages/secret",
        "http://[::ffff:127.0.0.1]:{port}/pages/secret",
        "http://10.1.2.3/",
        "http://192.168.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0:{port}/",
    ],
)
async def test_non_global_addresses_are_refused_by_default(site: Site, url: str) -> None:
    source = WebSource(urls=["https://example.org/"])
    with pytest.raises(RefusedLocation, match="address; pass allow_private=True"):
        await source.resolve(ref(url.format(port=site.port)))
    assert site.hits == Counter()


async def test_loopback_names_are_refused_after_dns_resolution(site: Site) -> None:
    source = WebSource(urls=["https://example.org/"])
    with pytest.raises(RefusedLocation, match=r"localhost \(resolves to 127\.0\.0\.1\)"):
        await source.resolve(ref(f"http://localhost:{site.port}/pages/secret"))


async def test_allow_private_allows_loopback_by_ip_and_by_name(site: Site) -> None:
    source = WebSource(urls=["https://example.org/"], allow_private=True)
    for host in ("127.0.0.1", "localhost"):
        text = await source.resolve(ref(f"http://{host}:{site.port}/pages/secret"))
        assert text == "internal secret"
    assert site.hits == Counter({"/pages/secret": 2})


async def test_a_redirect_to_the_metadata_address_is_refused(site: Site) -> None:
    source = WebSource(urls=["https://example.org/"], allowed_networks=["127.0.0.1/32"])
    with pytest.raises(RefusedLocation, match=r"169\.254\.169\.254 is a link-local address"):
        await source.resolve(ref(f"{site.base}/redirect/metadata"))
    assert site.hits == Counter({"/redirect/metadata": 1})


async def test_a_redirect_outside_the_allowed_networks_is_refused_before_connecting(
    site: Site,
) -> None:
    source = WebSource(urls=["https://example.org/"], allowed_networks=["127.0.0.1/32"])
    assert (await source.resolve(ref(f"{site.base}/redirect/page"))).startswith("Plaster")
    with pytest.raises(RefusedLocation, match=r"127\.0\.0\.2 is a loopback address"):
        await source.resolve(ref(f"{site.base}/redirect/other-loopback"))
    assert site.hits["/pages/secret"] == 0


async def test_only_http_and_https_are_fetched(site: Site) -> None:
    source = endpoint_source(site)
    for url in ("file:///etc/passwd", "ftp://example.org/x", "gopher://example.org/"):
        with pytest.raises(RefusedLocation, match="only http and https"):
            await source.resolve(ref(url))
    with pytest.raises(RefusedLocation, match="only http and https"):
        await source.resolve(ref(f"{site.base}/redirect/file"))


def test_address_refusal_names_the_kind_of_address() -> None:
    assert address_refusal("8.8.8.8") is None
    assert address_refusal("2001:4860:4860::8888") is None
    assert address_refusal("127.0.0.1") == "loopback"
    assert address_refusal("10.0.0.1") == "private"
    assert address_refusal("fd00::1") == "private"
    assert address_refusal("fe80::1%eth0") == "link-local"
    assert address_refusal("224.0.0.1") == "multicast"
    assert address_refusal("0.0.0.0") == "unspecified"
    assert address_refusal("100.64.0.1") == "not globally routable"
    assert address_refusal("::ffff:10.0.0.1") == "private (inside ::ffff:a00:1)"
    assert address_refusal("64:ff9b::7f00:1") == "loopback (inside 64:ff9b::7f00:1)"
    assert address_refusal("2002:7f00:1::") == "loopback (inside 2002:7f00:1::)"


# -- bounded reads and redirect hops (issue 12) ---------------------------------------------


async def test_a_compressed_page_is_capped_by_its_decompressed_size_without_inflating_it(
    site: Site,
) -> None:
    source = endpoint_source(site)  # the default cap: 2 MB
    tracemalloc.start()
    try:
        with pytest.raises(ContentTooLarge, match="more than 2000000 bytes; stopped reading"):
            await source.resolve(ref(f"{site.base}/pages/bomb"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The cap, a chunk and the parser's buffers; not the 64 MB the page inflates to.
    assert peak < 12_000_000, peak


@pytest.mark.parametrize("path", ["/pages/gzipped", "/pages/deflated", "/pages/raw-deflated"])
async def test_gzip_and_deflate_pages_are_read(site: Site, path: str) -> None:
    text = await endpoint_source(site).resolve(ref(f"{site.base}{path}"))
    assert text.startswith("Plaster guide\n\nHome\n\nGypsum plaster")


async def test_a_content_encoding_that_is_not_gzip_or_deflate_is_refused(site: Site) -> None:
    with pytest.raises(UnsupportedContent, match="content encoding 'br' refused"):
        await endpoint_source(site).resolve(ref(f"{site.base}/pages/brotli"))


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/redirect/metadata", r"169\.254\.169\.254 is a link-local address"),
        ("/redirect/other-loopback", r"127\.0\.0\.2 is a loopback address"),
        ("/redirect/other-port", r"127\.0\.0\.1 is a loopback address"),
    ],
)
async def test_allow_private_does_not_let_a_redirect_reach_another_internal_address(
    site: Site, path: str, said: str
) -> None:
    source = WebSource(urls=["https://example.org/"], allow_private=True)
    with pytest.raises(RefusedLocation, match=f"refused a redirect to .*{said}") as refused:
        await source.resolve(ref(f"{site.base}{path}"))
    assert "allowed_networks (--allow-network CIDR)" in str(refused.value)
    assert site.hits == Counter({path: 1})
    # The same server the first URL reached may still redirect to itself.
    text = await source.resolve(ref(f"{site.base}/redirect/twice"))
    assert text.startswith("Plaster guide")


async def test_a_redirect_into_an_allowed_network_passes_the_check(site: Site) -> None:
    source = WebSource(
        urls=["https://example.org/"], allow_private=True, allowed_networks=["127.0.0.2/32"]
    )
    # Past the address check: nothing listens on 127.0.0.2, so the connection fails.
    with pytest.raises(SourceUnavailable, match="127.0.0.2"):
        await source.resolve(ref(f"{site.base}/redirect/other-loopback"))


async def test_a_search_answer_nested_past_the_parsers_depth_is_a_clear_error(site: Site) -> None:
    deep = WebSource(search_endpoint=f"{site.base}/deep-search", allow_private=True)
    with pytest.raises(SourceError, match="the answer is not JSON"):
        await deep.search("plaster")
