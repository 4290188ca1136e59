"""The demo stack stays apart: `import durafact`, a client and a worker with
`DurafactPlugin` never import `durafact._local` (the embedded server, the local model
server, the grammar) nor the `local` extra's libraries, so a library user on a cluster
of their own needs none of it. Checked by module name, in a fresh interpreter that runs
a ready workflow on a real worker."""

from __future__ import annotations

import sys
from pathlib import Path

from temporalio.client import Client

from durafact.testing import Call, ScriptedModel
from tests.helpers import clean_env, run_command

# The `local` extra's: the demo stack itself, llama.cpp, the embedding model's libraries.
DEMO_STACK = ("durafact._local", "llama_cpp", "sentence_transformers", "torch")

# A user's app in one file: a client and a worker with the plugin, a ready workflow run
# on them, every public name of durafact loaded (they are exported lazily), and then the
# modules this interpreter imported. os._exit: temporalio's threads may call into Python
# while a finishing interpreter shuts down (temporalio/sdk-python#300).
APP = """
import asyncio, os, sys, uuid
from temporalio.client import Client
from temporalio.worker import Worker

import durafact
from durafact import DurafactPlugin, Goal, PlanExecuteWorkflow


async def main():
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"], plugins=[DurafactPlugin()])
    queue = f"imports-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, plugins=[DurafactPlugin()]):
        plan = await client.execute_workflow(
            PlanExecuteWorkflow.run, Goal(text="Plan a trip"), id=queue, task_queue=queue
        )
    print(plan.answer.text)
    for name in durafact.__all__:
        getattr(durafact, name)
    print("\\n".join(sorted(sys.modules)))


asyncio.run(main())
sys.stdout.flush()
os._exit(0)
"""


def planner(call: Call) -> str | dict:
    if call.schema_name == "Plan":
        return {"steps": ["Pick dates"]}
    return "planned"


async def test_a_client_and_a_worker_with_the_plugin_import_no_demo_stack(
    client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(planner)
    env = clean_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        OPENAI_BASE_URL=model.url,
        OPENAI_API_KEY="test",
        DURAFACT_MODEL="scripted",
    )
    run = await run_command(sys.executable, "-c", APP, env=env, cwd=tmp_path, timeout=120)
    assert run.code == 0, run.err
    answer, *modules = run.out.splitlines()
    assert answer == "planned"
    assert "durafact._runtime.worker_kit" in modules  # the worker's side was imported
    assert [m for m in modules if m.split(".")[0] in DEMO_STACK or m.startswith(DEMO_STACK)] == []
