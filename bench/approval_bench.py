"""How often a person is asked: a 20-call agent run with repeated destructive calls,
answered without `remember`, with `remember=call` on the first answer, and on every one.

    python -m bench.approval_bench [--calls 20]

One run starts a real dev server, the scripted model and an in-process worker with a
destructive tool of this module (`delete_file`, which counts its runs). The agent calls
`delete_file` `--calls` times: mostly the same path, with two other paths in between
(one of them twice), then answers. A person (this script, through the `decide` update)
approves every question as it comes. Printed: the questions asked, and the tool's runs
(every call runs in every mode: only the questions change).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid

from bench._common import Stack, dev_stack
from durafact._activities.tools import tool
from durafact._core.approval import ApprovalAnswer, ApprovalQuestion, RememberScope
from durafact._recipes import ReActInput, ReActResult, ReActWorkflow
from durafact.testing import Call

RUNS: list[str] = []
# The paths of the calls, by their number from 1; every other call is the same path.
OTHERS = {7: "/tmp/a.log", 14: "/tmp/a.log", 17: "/tmp/b.log"}
SAME = "/tmp/cache"


@tool(destructive=True)
def delete_file(path: str) -> str:
    """Delete a file for good."""
    RUNS.append(path)
    return f"deleted {path}"


def agent(calls: int):  # noqa: ANN201
    def reply(call: Call) -> str:
        turn = int(call.activity_id.rsplit(":", 1)[-1])
        if turn > calls:
            return "Thought: done.\nFinal Answer: cleaned up"
        path = json.dumps({"path": OTHERS.get(turn, SAME)})
        return f"Thought: delete it.\nAction: delete_file\nAction Input: {path}\nPAUSE"

    return reply


async def run(stack: Stack, calls: int, remember: str) -> tuple[int, int]:
    """(questions asked, tool runs) of one run; `remember`: none, first or every."""
    RUNS.clear()
    handle = await stack.client.start_workflow(
        ReActWorkflow.run,
        ReActInput(question="Clean up", tools=["delete_file"], max_turns=calls + 1),
        id=f"approval-bench-{uuid.uuid4().hex[:8]}",
        task_queue=stack.settings.task_queue,
    )
    result = asyncio.ensure_future(handle.result())
    answered = 0
    while not result.done():
        waiting = await handle.query("pending_questions", result_type=list[ApprovalQuestion])
        for question in waiting:
            scope: RememberScope | None = None
            if remember == "every" or (remember == "first" and answered == 0):
                scope = "call"
            answer = ApprovalAnswer(question_id=question.id, approved=True, remember=scope)
            await handle.execute_update("decide", answer)
            answered += 1
        await asyncio.sleep(0.02)
    outcome: ReActResult = await result
    assert outcome.ending == "answer" and len(outcome.tool_calls) == calls, outcome
    ledger = await handle.query(ReActWorkflow.artifacts)
    return len(ledger.find_all(ApprovalQuestion)), len(RUNS)


async def main(calls: int) -> None:
    async with dev_stack(agent(calls)) as stack, stack.worker(tools=[delete_file]):
        rows = [(mode, *await run(stack, calls, mode)) for mode in ("none", "first", "every")]
    distinct = len({OTHERS.get(n, SAME) for n in range(1, calls + 1)})
    print(f"A {calls}-call ReAct run: delete_file on {distinct} distinct paths, every question")
    print("approved as it comes")
    print()
    print("| remember=call on | questions asked | tool runs |")
    print("|---|---|---|")
    labels = {"none": "no answer", "first": "the first answer", "every": "every answer"}
    for mode, questions, runs in rows:
        print(f"| {labels[mode]} | {questions} | {runs} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    asyncio.run(main(parser.parse_args().calls))
