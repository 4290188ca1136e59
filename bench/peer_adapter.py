"""How ../shared/peer_bench drives durafact (its system s4): `make_adapter()`.

The harness runs this inside its own child process with the checkout first on
`sys.path`, against its fake OpenAI-compatible server and a dev server of its own.
W1 (plan + N steps + finish) runs the shipped `PlanExecuteWorkflow`; W2 (a tool
loop of N turns) runs the shipped `ReActWorkflow` with the native protocol and the
harness's `lookup` tool registered on the worker, at any N up to its `max_turns`
bound (10,000). A long W2 continues as new between two turns (past 1 MB of history by
default); the harness reads a workflow's history by its id, which is the last run of
the chain: `bench/react_bench.py` adds up every run. The client has durafact's data
converter, whose payload store (a temporary folder) takes payloads of 128 KiB or more.
"""

from __future__ import annotations

import contextlib
import tempfile
import uuid

from peers.common import lookup_text
from temporalio.client import Client

from durafact._activities.tools import tool
from durafact._recipes import Goal, PlanExecuteWorkflow, ReActInput, ReActWorkflow
from durafact._runtime.codec import data_converter
from durafact._runtime.search_attributes import ensure_search_attributes
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker


@tool
def lookup(query: str) -> str:
    """Look up a topic and return what the library has on it."""
    return lookup_text(query)


class Adapter:
    def __init__(self) -> None:
        self.info: dict = {"workflows": {"W1": "PlanExecuteWorkflow", "W2": "ReActWorkflow"}}
        self.client: Client
        self._stack = contextlib.AsyncExitStack()
        self._queue = f"peer-bench-s4-{uuid.uuid4().hex[:8]}"
        # Goal.max_steps is bounded (Field le=...): the longest plan W1 can ask for.
        self._max_steps = next(
            m.le for m in Goal.model_fields["max_steps"].metadata if getattr(m, "le", None)
        )

    def unsupported(self, workload: str, n: int | None) -> str | None:
        if workload == "W1" and n is not None and n > self._max_steps:
            return f"Goal.max_steps allows at most {self._max_steps} steps"
        return None

    async def start(
        self, temporal_address: str, model_base_url: str, api_key: str, model: str
    ) -> None:
        # durafact's data converter, as its clients and workers use it: large payloads (a
        # long loop's carry) go to a payload store, here a folder removed at stop.
        payloads = self._stack.enter_context(tempfile.TemporaryDirectory())
        converter = data_converter({"DURAFACT_PAYLOADS": f"file:{payloads}"})
        self.client = await Client.connect(temporal_address, data_converter=converter)
        await ensure_search_attributes(self.client, register=True)
        settings = Settings(
            temporal_address=temporal_address,
            task_queue=self._queue,
            openai_base_url=model_base_url,
            openai_api_key=api_key,
            model=model,
        )
        await self._stack.enter_async_context(build_worker(self.client, settings, tools=[lookup]))

    async def run(self, workload: str, n: int, workflow_id: str, question: str) -> str:
        if workload == "W2":
            loop = await self.client.execute_workflow(
                ReActWorkflow.run,
                ReActInput(
                    question=question,
                    tools=["lookup"],
                    protocol="native",
                    max_turns=n + 1,
                    loop_limit=0,
                ),
                id=workflow_id,
                task_queue=self._queue,
            )
            if loop.ending != "answer" or len(loop.tool_calls) != n:
                raise RuntimeError(
                    f"{loop.ending} after {len(loop.tool_calls)} calls, expected {n}"
                )
            return loop.answer or ""
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
