"""Traces in OpenTelemetry: Temporal's spans, and one span per model call and tool call.

Off unless configured. `provider_from_env` reads the standard variables:
`OTEL_TRACES_EXPORTER` (`otlp`, the default once an OTLP endpoint is set, or
`console`), `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (OTLP
over HTTP), `OTEL_SERVICE_NAME` (default `durafact`). It needs the optional extra
`durafact[trace]` (opentelemetry-sdk and the OTLP exporter).

`DurafactPlugin` then installs `temporalio.contrib.opentelemetry.TracingInterceptor`
(the client's start, the workflow, each activity; it makes no span when a workflow
task is replayed; queries pass untraced: durafact/_runtime/run_tracing.py) and
`GenAiSpans`, whose spans follow OpenTelemetry's GenAI semantic conventions: a model
call is `chat MODEL` with `gen_ai.operation.name`, `gen_ai.request.model`,
`gen_ai.usage.input_tokens`/`output_tokens` and `gen_ai.response.finish_reasons`; a
tool call is `execute_tool NAME`. Each carries the workflow id, the run id and the
artifact id. No prompt, reply, argument or tool output text unless
`DURAFACT_TRACE_CONTENT=1`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer, TracerProvider
from temporalio import activity
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from durafact._core.llm import LLMRequest, LLMResponse
from durafact._core.tools import ToolRequest, ToolResult
from durafact._runtime.settings import SettingsError

TRACE_CONTENT_ENV = "DURAFACT_TRACE_CONTENT"
TRACER_NAME = "durafact"
# Any of these turns tracing on.
SWITCHES = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)
EXPORTERS = ("otlp", "console", "none")
# An exception's message may quote a prompt or a reply (a validation error does): the
# spans record its type only (`_failing_span`), never the message or a stack trace.
QUIET = {"record_exception": False, "set_status_on_exception": False}


class TracingConfigError(SettingsError):
    """The OTEL_* variables ask for something durafact cannot do; one line."""


def provider_from_env(env: Mapping[str, str]) -> TracerProvider | None:
    """A tracer provider exporting as the OTEL_* variables say; None when none is set
    (or `OTEL_TRACES_EXPORTER=none`)."""
    if not any(env.get(name) for name in SWITCHES):
        return None
    exporter_name = env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if exporter_name not in EXPORTERS:
        raise TracingConfigError(
            f"OTEL_TRACES_EXPORTER: {exporter_name!r} is not one durafact sets up "
            f"({', '.join(EXPORTERS)}); give DurafactPlugin tracing= your own provider"
        )
    if exporter_name == "none":
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )
    except ImportError:
        raise TracingConfigError(
            "OTEL_* asks for traces, but OpenTelemetry's SDK is not installed: "
            "pip install 'durafact[trace]'"
        ) from None
    service = env.get("OTEL_SERVICE_NAME") or "durafact"
    provider = SdkTracerProvider(resource=Resource.create({"service.name": service}))
    if exporter_name == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_url(env))))
    return provider


def otlp_url(env: Mapping[str, str]) -> str:
    """Where OTLP/HTTP traces go: the traces endpoint as given, or `/v1/traces` of the
    general one (the OTLP specification's rule), or the local collector's default."""
    if traces := env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return traces
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4318"
    return f"{base.rstrip('/')}/v1/traces"


def interceptors(provider: TracerProvider, default_model: str, content: bool) -> list[Any]:
    """Temporal's tracing interceptor (queries aside) and durafact's GenAI spans, on one
    provider."""
    from durafact._runtime.run_tracing import RunTracing

    tracer = provider.get_tracer(TRACER_NAME)
    return [RunTracing(tracer), GenAiSpans(tracer, default_model, content)]


class GenAiSpans(Interceptor):
    """A span per `request_model` and `call_tool` activity attempt, inside Temporal's
    `RunActivity` span. Activities never replay, so no span is made twice."""

    def __init__(self, tracer: Tracer, default_model: str, content: bool = False) -> None:
        self.tracer = tracer
        self.default_model = default_model
        self.content = content

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next, self)


class _Inbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, spans: GenAiSpans) -> None:
        super().__init__(next)
        self.spans = spans

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        [request] = input.args if len(input.args) == 1 else [None]
        if isinstance(request, LLMRequest):
            return await self._model_call(input, request)
        if isinstance(request, ToolRequest):
            return await self._tool_call(input, request)
        return await self.next.execute_activity(input)

    async def _model_call(self, input: ExecuteActivityInput, request: LLMRequest) -> Any:
        model = request.model or self.spans.default_model
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": model,
            **run_attributes("llm:"),
        }
        if request.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = request.max_tokens
        if request.temperature is not None:
            attributes["gen_ai.request.temperature"] = request.temperature
        if self.spans.content:
            attributes["gen_ai.input.messages"] = json.dumps(
                [m.model_dump(mode="json", exclude_defaults=True) for m in request.messages],
                ensure_ascii=False,
            )
        with self.spans.tracer.start_as_current_span(
            f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes, **QUIET
        ) as span:
            response = await _failing_span(span, self.next.execute_activity(input))
            if isinstance(response, LLMResponse):
                span.set_attributes(
                    {
                        "gen_ai.response.model": response.model or model,
                        "gen_ai.usage.input_tokens": response.usage.prompt_tokens,
                        "gen_ai.usage.output_tokens": response.usage.completion_tokens,
                        "gen_ai.response.finish_reasons": [response.finish_reason],
                    }
                )
                if self.spans.content:
                    span.set_attribute("gen_ai.output.messages", reply_json(response))
            return response

    async def _tool_call(self, input: ExecuteActivityInput, request: ToolRequest) -> Any:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": request.call.name,
            "gen_ai.tool.call.id": request.call.id,
            **run_attributes(""),
        }
        if self.spans.content:
            attributes["gen_ai.tool.call.arguments"] = json.dumps(
                request.call.arguments, ensure_ascii=False
            )
        with self.spans.tracer.start_as_current_span(
            f"execute_tool {request.call.name}",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            **QUIET,
        ) as span:
            result = await _failing_span(span, self.next.execute_activity(input))
            if isinstance(result, ToolResult) and not result.ok:
                span.set_status(Status(StatusCode.ERROR, result.error_type or "tool failed"))
                span.set_attribute("error.type", result.error_type or "ToolFailed")
            if self.spans.content and isinstance(result, ToolResult):
                span.set_attribute("gen_ai.tool.call.result", result.content)
            return result


def run_attributes(prefix: str) -> dict[str, Any]:
    """Which run and artifact a span belongs to: a model call's activity id is `llm:`
    and the id of the artifact it makes (an opaque id when the run is encrypted)."""
    info = activity.info()
    return {
        "durafact.workflow_id": info.workflow_id,
        "durafact.run_id": info.workflow_run_id,
        "durafact.artifact_id": info.activity_id.removeprefix(prefix),
        "durafact.attempt": info.attempt,
    }


def reply_json(response: LLMResponse) -> str:
    message: dict[str, Any] = {"role": "assistant", "content": response.text}
    if response.data is not None:
        message["content"] = json.dumps(response.data, ensure_ascii=False)
    if response.tool_calls:
        message["tool_calls"] = [c.model_dump(mode="json") for c in response.tool_calls]
    return json.dumps([message], ensure_ascii=False)


async def _failing_span(span: Any, awaitable: Any) -> Any:
    """`awaitable`'s result; an exception it raises is recorded on the span as an error
    (a retried attempt's span says why it failed) and raised again."""
    try:
        return await awaitable
    except BaseException as exc:
        span.set_attribute("error.type", getattr(exc, "type", None) or type(exc).__name__)
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        raise
