"""Temporal's tracing interceptor, less the spans of queries: a command that follows a
run asks its `progress` three times a second, and each ask would be a trace of its
own. Imported only when tracing is on (`temporalio.contrib.opentelemetry` needs the
OpenTelemetry SDK, the `trace` extra)."""

from __future__ import annotations

from typing import Any

from temporalio.client import OutboundInterceptor, QueryWorkflowInput
from temporalio.contrib.opentelemetry import TracingInterceptor


class RunTracing(TracingInterceptor):
    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _QueriesUntraced(super().intercept_client(next), next)


class _QueriesUntraced(OutboundInterceptor):
    """Everything through the tracing interceptor but queries, which go past it (with
    no span context, the worker makes no span for them either)."""

    def __init__(self, traced: OutboundInterceptor, plain: OutboundInterceptor) -> None:
        super().__init__(traced)
        self._plain = plain

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        return await self._plain.query_workflow(input)
