"""The codec server: the HTTP `/encode` and `/decode` endpoints the Temporal Web UI and
CLI call to show encrypted payloads decrypted, for whoever can reach it.

    python -m durafact._runtime.codec_server [--host 127.0.0.1] [--port 8081] [--origin URL ...]

Runs with the keys of durafact/_runtime/codec.py (`DURAFACT_KEYS` or `DURAFACT_KEYS_FILE`); `up`
starts it when keys are configured and starts the embedded dev server with
`--ui-codec-endpoint` pointing at it. The protocol (temporalio/samples-go
codec-server/protocol.md): POST a `Payloads` message in protobuf JSON
(`{"payloads": [{"metadata": {...}, "data": "..."}]}`), get the same shape back; only
the last path segment picks the endpoint, so `/any/prefix/decode` works.

The browser calls it from the Web UI's origin: CORS allows the origins given by
`--origin` (repeatable) or `DURAFACT_CODEC_ORIGINS` (comma-separated), default
http://localhost:8233 and http://127.0.0.1:8233. With `DURAFACT_CODEC_TOKEN` set,
every request but the CORS preflight needs `Authorization: Bearer TOKEN` (the
temporal CLI sends it with `--codec-auth "Bearer TOKEN"`).
"""

from __future__ import annotations

import argparse
import hmac
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from durafact._runtime.codec import (
    CodecConfigError,
    EncryptionCodec,
    PayloadDecryptError,
    keys_from_env,
)
from durafact._runtime.logs import configure_logging

TOKEN_ENV = "DURAFACT_CODEC_TOKEN"
ORIGINS_ENV = "DURAFACT_CODEC_ORIGINS"
PORT_ENV = "DURAFACT_CODEC_PORT"
DEFAULT_PORT = 8081
DEFAULT_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")
MAX_BODY = 64 * 1024 * 1024  # the largest payload set one request may carry
ALLOWED_HEADERS = "Content-Type, X-Namespace, Authorization"

log = logging.getLogger("durafact.codec_server")


def origins_from(value: str | None, default: Sequence[str] = DEFAULT_ORIGINS) -> tuple[str, ...]:
    """Origins from a comma-separated list (a trailing `/` dropped), else `default`."""
    given = [o.strip().rstrip("/") for o in (value or "").split(",") if o.strip()]
    return tuple(given) or tuple(default)


class CodecServer(ThreadingHTTPServer):
    """A threaded HTTP server answering the codec protocol with one EncryptionCodec."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        codec: EncryptionCodec,
        origins: Sequence[str] = DEFAULT_ORIGINS,
        token: str | None = None,
    ) -> None:
        super().__init__(address, CodecHandler)
        self.codec = codec
        self.origins = frozenset(origins)
        self.token = token or None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class CodecHandler(BaseHTTPRequestHandler):
    server: CodecServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        log.info("%s %s", self.address_string(), format % args)

    def do_OPTIONS(self) -> None:  # noqa: N802  (the CORS preflight: never needs the token)
        self._reply(HTTPStatus.NO_CONTENT, b"", preflight=True)

    def do_POST(self) -> None:  # noqa: N802
        action = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        if action not in ("encode", "decode"):
            message = f"no endpoint {self.path!r}: POST /encode or /decode"
            return self._error(HTTPStatus.NOT_FOUND, message)
        if self.server.token and not self._authorized():
            return self._error(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            return self._error(HTTPStatus.BAD_REQUEST, "send a JSON body with Content-Length")
        body = self.rfile.read(length)
        try:
            payloads = json_format.Parse(body, Payloads())
        except (json_format.ParseError, UnicodeDecodeError) as exc:
            return self._error(HTTPStatus.BAD_REQUEST, f"not a Payloads JSON message: {exc}")
        codec = self.server.codec
        try:
            if action == "encode":
                out = [codec.encrypt(p) for p in payloads.payloads]
            else:
                out = [codec.decrypt(p) for p in payloads.payloads]
        except PayloadDecryptError as exc:
            return self._error(HTTPStatus.UNPROCESSABLE_ENTITY, str(exc))
        text = json_format.MessageToJson(Payloads(payloads=out), indent=None)
        self._reply(HTTPStatus.OK, text.encode(), content_type="application/json")

    def _authorized(self) -> bool:
        scheme, _, value = (self.headers.get("Authorization") or "").partition(" ")
        expected = self.server.token or ""
        return scheme.lower() == "bearer" and hmac.compare_digest(
            value.strip().encode(), expected.encode()
        )

    def _error(self, status: HTTPStatus, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self._reply(status, body, content_type="application/json")

    def _reply(
        self,
        status: HTTPStatus,
        body: bytes,
        *,
        content_type: str | None = None,
        preflight: bool = False,
    ) -> None:
        self.send_response(status)
        origin = self.headers.get("Origin")
        if origin and origin.rstrip("/") in self.server.origins:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Vary", "Origin")
            if preflight:
                self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
                self.send_header("Access-Control-Allow-Headers", ALLOWED_HEADERS)
                self.send_header("Access-Control-Max-Age", "600")
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="codec_server", description=__doc__.splitlines()[0])
    top.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    top.add_argument(
        "--port", type=int, default=None, help=f"port (also {PORT_ENV}; default {DEFAULT_PORT})"
    )
    top.add_argument(
        "--origin",
        action="append",
        default=[],
        metavar="URL",
        help=f"a Web UI origin CORS allows (repeatable; also {ORIGINS_ENV}; "
        f"default {', '.join(DEFAULT_ORIGINS)})",
    )
    return top


def build(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> CodecServer:
    """The server `args` and `env` describe; CodecConfigError with a one-line reason."""
    env = os.environ if env is None else env
    keyring = keys_from_env(env)
    if keyring is None:
        raise CodecConfigError("no keys: set DURAFACT_KEYS or DURAFACT_KEYS_FILE")
    port = args.port
    if port is None:
        raw = env.get(PORT_ENV) or str(DEFAULT_PORT)
        if not raw.isdigit() or not 0 < int(raw) < 65536:
            raise CodecConfigError(f"{PORT_ENV}={raw!r} is not a port number")
        port = int(raw)
    origins = origins_from(",".join(args.origin) or env.get(ORIGINS_ENV))
    try:
        return CodecServer((args.host, port), EncryptionCodec(keyring), origins, env.get(TOKEN_ENV))
    except OSError as exc:
        raise CodecConfigError(f"cannot listen on {args.host}:{port}: {exc.strerror}") from None


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    configure_logging()
    try:
        server = build(args)
    except CodecConfigError as exc:
        print(f"codec server: {exc}", file=sys.stderr)
        sys.exit(2)

    def stop(*_: object) -> None:  # shutdown() waits for serve_forever: not on its thread
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info(
        "codec server on %s (keys %s; origins %s; token %s)",
        server.url,
        ", ".join(server.codec.keyring.ids if server.codec.keyring else []),
        ", ".join(sorted(server.origins)),
        "required" if server.token else "not required",
    )
    with server:
        server.serve_forever()
    log.info("codec server stopped")


if __name__ == "__main__":
    main()
