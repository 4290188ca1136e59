"""A real HTTP server on loopback for WebSource tests: a SearxNG-style search endpoint
and pages, every request counted, failures injected on cue."""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Page:
    title: str
    body: str
    content_type: str = "text/html; charset=utf-8"

    def html(self) -> str:
        paragraphs = "".join(f"<p>{p}</p>" for p in self.body.split("\n\n"))
        return (
            f"<html><head><title>{self.title}</title><script>var x = 1;</script></head>"
            f"<body><h1>{self.title}</h1>{paragraphs}</body></html>"
        )


@dataclass
class LoopbackWeb:
    """`pages` by path; `results` is what `/search` answers (url, title, content, score)."""

    pages: dict[str, Page] = field(default_factory=dict)
    results: list[dict[str, Any]] = field(default_factory=list)
    requests: Counter[str] = field(default_factory=Counter)
    queries: list[str] = field(default_factory=list)
    _faults: dict[str, list[tuple[int, dict[str, str]]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def search_endpoint(self) -> str:
        return f"{self.base}/search"

    def url(self, path: str) -> str:
        return f"{self.base}{path}"

    def start(self) -> LoopbackWeb:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail(self, path: str, status: int, times: int = 1, retry_after: str | None = None) -> None:
        """The next `times` requests for `path` answer `status` (with `retry-after`)."""
        headers = {"retry-after": retry_after} if retry_after is not None else {}
        with self._lock:
            self._faults.setdefault(path, []).extend([(status, headers)] * times)

    def add_results(self, *paths: str, scores: list[float] | None = None) -> None:
        """Search results naming these pages, with their titles and first lines."""
        for i, path in enumerate(paths):
            page = self.pages[path]
            result = {"url": self.url(path), "title": page.title, "content": page.body[:120]}
            if scores is not None:
                result["score"] = scores[i]
            self.results.append(result)

    def _respond(self, raw_path: str) -> tuple[int, str, bytes, dict[str, str]]:
        parts = urlsplit(raw_path)
        with self._lock:
            self.requests[parts.path] += 1
            faults = self._faults.get(parts.path)
            fault = faults.pop(0) if faults else None
        if fault is not None:
            status, headers = fault
            return status, "text/plain", f"injected {status}".encode(), headers
        if parts.path == "/search":
            self.queries.extend(parse_qs(parts.query).get("q", []))
            return 200, "application/json", json.dumps({"results": self.results}).encode(), {}
        page = self.pages.get(parts.path)
        if page is None:
            return 404, "text/plain", b"not found", {}
        body = page.html() if page.content_type.startswith("text/html") else page.body
        return 200, page.content_type, body.encode(), {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        web = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                status, content_type, body, headers = web._respond(self.path)
                try:
                    self.send_response(status)
                    self.send_header("content-type", content_type)
                    self.send_header("content-length", str(len(body)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler
