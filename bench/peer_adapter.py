"""How ../shared/peer_bench drives durafact (its system s4): `make_adapter()`.

The harness runs this inside its own child process with the checkout first on
`sys.path`, against its fake OpenAI-compatible server and a dev server of its own.
W1 (plan + N steps + finish) runs the shipped `PlanExecuteWorkflow`.
"""

from __future__ import annotations

import contextlib
import uuid

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from cli.connection import ensure_search_attributes
from cli.settings import Settings
from cli.worker import build_worker
from workflows import Goal, PlanExecuteWorkflow


class Adapter:
    def __init__(self) -> None:
        self.info: dict = {"workflows": {"W1": "PlanExecuteWorkflow"}}
        self.client: Client
        self._stack = contextlib.AsyncExitStack()
        self._queue = f"peer-bench-s4-{uuid.uuid4().hex[:8]}"
        # Goal.max_steps is bounded (Field le=...): the longest plan W1 can ask for.
        self._max_steps = next(
            m.le for m in Goal.model_fields["max_steps"].metadata if getattr(m, "le", None)
        )

    def unsupported(self, workload: str, n: int | None) -> str | None:
        if workload == "W2":
            return "durafact has no tool loop yet"
        if n is not None and n > self._max_steps:
            return f"Goal.max_steps allows at most {self._max_steps} steps"
        return None

    async def start(
        self, temporal_address: str, model_base_url: str, api_key: str, model: str
    ) -> None:
        self.client = await Client.connect(
            temporal_address, data_converter=pydantic_data_converter
        )
        await ensure_search_attributes(self.client, register=True)
        settings = Settings(
            temporal_address=temporal_address,
            task_queue=self._queue,
            openai_base_url=model_base_url,
            openai_api_key=api_key,
            model=model,
        )
        await self._stack.enter_async_context(build_worker(self.client, settings))

    async def run(self, workload: str, n: int, workflow_id: str, question: str) -> str:
        result = await self.client.execute_workflow(
            PlanExecuteWorkflow.run,
            Goal(text=question, max_steps=n),
            id=workflow_id,
            task_queue=self._queue,
        )
        if len(result.steps) != n:
            raise RuntimeError(f"planned {len(result.steps)} steps, expected {n}")
        return result.answer.text

    async def stop(self) -> None:
        await self._stack.aclose()


def make_adapter() -> Adapter:
    return Adapter()
