"""`durafact eval` on runs a person answered: the routing recipe (facts, a route, a
specialist's report, a person's approval) recorded on the session's dev server with the
scripted model (tests/evaluation/__init__.py, `desk`) and its questions answered as a
person does; then re-run on a dev server of eval's own, where each question gets the
recorded answer, and a question the recorded run did not ask stops the re-run. A run
steered with a note is still not re-run."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateStage

from durafact._activities.tools import tool
from durafact._core.approval import ApprovalAnswer, ApprovalPolicy
from durafact._core.steer import SteerNote
from durafact._recipes import ReActInput, ReActWorkflow, SupervisorRequest, SupervisorWorkflow
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact._service.approvals import approve
from durafact._service.evaluation import EvalOptions, evaluate
from durafact.testing import Call, ScriptedModel, reject
from durafact.testing import approve as decide
from tests.cli.test_eval import durafact_eval, eval_env
from tests.evaluation import desk
from tests.helpers import question_waiting
from tests.workflows.test_react import (  # noqa: F401  (react_worker: a fixture)
    DELETED,
    act,
    delete_file,
    final,
    react_worker,
    start,
    turns,
)

REQUEST = "Renovate the kitchen for 3000 EUR by March"
DESK_V1 = "tests.evaluation.desk_v1"
DESK_V2 = "tests.evaluation.desk_v2"
# A re-run that hangs fails the test in time, with "did not finish".
OPTIONS = EvalOptions(timeout=timedelta(seconds=60))


async def routed(client: Client, task_queue: str, workflow: object = SupervisorWorkflow.run):
    """A routing run of the kitchen request, started: its handle."""
    return await client.start_workflow(
        workflow,  # type: ignore[arg-type]
        SupervisorRequest(request=REQUEST),
        id=f"desk-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
    )


async def test_a_route_a_person_approved_is_re_run_with_the_recorded_approval_and_sends_nothing(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(desk)
    handle = await routed(client, worker.task_queue)
    question = await question_waiting(handle)
    # As `durafact approve` answers: the signal, naming the oldest pending question.
    answer = ApprovalAnswer(approved=True, reason="fits the budget", by="alice")
    await approve(client, model.plugin().registry, handle.id, answer)
    await handle.result()
    before = len(model.calls)

    run = await durafact_eval(handle.id, "--json", env=eval_env(client, model))

    assert run.code == 0, run.err
    assert len(model.calls) == before  # not one call reached the model
    report = json.loads(run.out)
    assert report["totals"] | {"sent_usage": None, "replayed_usage": None} == {
        "runs": 1,
        "changed_outputs": 0,
        "replayed": 3,  # the facts, the route, the report
        "sent": 0,
        "not_sent": 0,
        "questions_answered": 1,
        "sent_usage": None,
        "replayed_usage": None,
    }
    [rerun] = report["runs"]
    assert rerun["identical"] and rerun["new_end"] == "completed"
    assert rerun["questions_answered"] == 1 and rerun["stopped_at"] is None
    assert f"  {question.id} (approve) approved by alice: fits the budget" in rerun["new_output"]


async def test_a_change_that_asks_about_another_report_stops_the_re_run_at_that_question(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    """The changed router sends the request to `timeline`: the question has the recorded
    question's id, but asks about the timeline report, which nobody approved."""
    model.reply(desk)
    async with build_worker(client, settings, recipes=[DESK_V1]):
        handle = await routed(client, settings.task_queue, "HelpDesk")
        outcome = await decide(handle, await question_waiting(handle))
        await handle.result()

    report = await evaluate(client, model.plugin(recipes=[DESK_V2]), [handle.id], OPTIONS)

    [rerun] = report.runs
    assert rerun.stopped_at is not None and rerun.stopped_at.id == outcome.question_id
    assert rerun.stopped_at.text.startswith("Approve the timeline report for 'Renovate")
    assert rerun.new_end == (
        f"stopped at {outcome.question_id}: the recorded run asked it about something else"
    )
    assert rerun.new_output is None and not rerun.identical
    assert rerun.questions_answered == 0
    answered = {call.activity_id.split(":")[1]: call.answered for call in rerun.calls}
    assert answered == {"facts": "recording", "task": "model", "report": "model"}


async def test_a_rejection_with_corrected_facts_is_re_run_as_the_same_rejections(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    """Rejected with a corrected budget, the report is rebuilt and asked about again,
    and rejected: the re-run gets both answers, and rebuilds and rejects the same."""
    model.reply(desk)
    handle = await routed(client, worker.task_queue)
    fix = {"budget": "5000 EUR"}
    first = await reject(handle, await question_waiting(handle), reason="more money", changes=fix)
    second = await reject(handle, await question_waiting(handle, n=2), reason="still too little")
    result = await handle.result()
    before = len(model.calls)

    report = await evaluate(client, model.plugin(), [handle.id], OPTIONS)

    assert len(model.calls) == before
    [rerun] = report.runs
    assert rerun.questions_answered == 2
    assert rerun.count("recording") == 4 and rerun.count("model") == 0  # and the rebuilt report
    assert rerun.identical, (rerun.old_output, rerun.new_output)
    assert not result.approved and rerun.new_output is not None
    for outcome in (first, second):
        assert f"{outcome.question_id} (approve) rejected by test: {outcome.reason}" in (
            rerun.new_output
        )
    assert "(changes: budget=5000 EUR)" in rerun.new_output


async def test_a_tool_call_a_person_approved_is_approved_again_and_answered_from_the_recording(
    client: Client,
    react_worker: Settings,  # noqa: F811  (the fixture imported above)
    model: ScriptedModel,
) -> None:
    model.reply(turns(act("delete_file", "/tmp/old.txt"), final("deleted")))
    handle = await start(client, react_worker, "Clean up the temp file", tools=["delete_file"])
    await decide(handle, await question_waiting(handle), by="ops")
    await handle.result()
    before = len(model.calls)

    report = await evaluate(client, model.plugin(tools=[delete_file]), [handle.id], OPTIONS)

    assert len(model.calls) == before and DELETED == ["/tmp/old.txt"]  # not deleted again
    [rerun] = report.runs
    assert rerun.questions_answered == 1 and rerun.tools.replayed == 1
    assert rerun.count("recording") == 2 and rerun.count("model") == 0
    assert rerun.identical, (rerun.old_output, rerun.new_output)


async def test_a_question_nobody_answered_times_out_again(
    client: Client,
    react_worker: Settings,  # noqa: F811  (the fixture imported above)
    model: ScriptedModel,
) -> None:
    """Not a new question: the recorded run asked it, and let it time out."""
    model.reply(turns(act("delete_file", "/tmp/x"), final("nobody answered")))
    policy = ApprovalPolicy(timeout=timedelta(seconds=1))
    request = ReActInput(
        question="Delete x if someone agrees", tools=["delete_file"], approval=policy
    )
    handle = await client.start_workflow(
        ReActWorkflow.run,
        request,
        id=f"react-{uuid.uuid4().hex[:8]}",
        task_queue=react_worker.task_queue,
    )
    await handle.result()

    report = await evaluate(client, model.plugin(tools=[delete_file]), [handle.id], OPTIONS)

    [rerun] = report.runs
    assert rerun.questions_answered == 0 and rerun.stopped_at is None
    assert rerun.new_end == "completed" and rerun.identical
    # The model hears "not approved: timed out" again: the recorded request.
    assert rerun.count("recording") == 2 and rerun.count("model") == 0
    assert "delete_file failed (NotApproved)" in (rerun.new_output or "")


@tool(name="tidy")
def tidy_v1(path: str) -> str:
    """Tidy a folder."""
    return f"tidied {path}"


@tool(name="tidy", destructive=True)
def tidy_v2(path: str) -> str:
    """Tidy a folder (it deletes what it does not know)."""
    return f"tidied {path}"


async def test_a_question_the_recorded_run_did_not_ask_stops_the_re_run(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    """The tool became destructive: the re-run asks before it runs, and nobody did."""
    model.reply(turns(act("tidy", "/tmp"), final("tidied")))
    async with build_worker(client, settings, tools=[tidy_v1]):
        handle = await start(client, settings, "Tidy /tmp", tools=["tidy"])
        await handle.result()

    report = await evaluate(client, model.plugin(tools=[tidy_v2]), [handle.id], OPTIONS)

    [rerun] = report.runs
    assert rerun.stopped_at is not None and rerun.stopped_at.tool == "tidy"
    assert rerun.new_end == f"stopped at {rerun.stopped_at.id}: the recorded run did not ask it"
    assert rerun.new_output is None and rerun.tools.replayed == 0  # it never ran


async def test_a_run_steered_with_a_note_is_not_re_run(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(turns(act("calculator", "12 * 0.25"), final("3 euros")))

    def first_turn(call: Call) -> bool:
        return call.activity_id.startswith("llm:react:") and call.activity_id.endswith(":1")

    held = model.hold(first_turn)
    handle: WorkflowHandle = await start(client, worker, "What is a quarter of 12 euros?")
    await asyncio.to_thread(model.wait_for, first_turn)
    steering = await handle.start_update(
        ReActWorkflow.steer, SteerNote(text="in euros"), wait_for_stage=WorkflowUpdateStage.ACCEPTED
    )
    held.set()
    await steering.result()
    await handle.result()

    report = await evaluate(client, model.plugin(), [handle.id], OPTIONS)

    [rerun] = report.runs
    assert rerun.skipped == (
        "it took input from outside while it ran (steer): a re-run would wait for it"
    )


async def test_a_run_answered_without_naming_the_question_is_not_re_run(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    """A signal sent by hand answers the oldest pending question: which one, the
    recording does not say."""
    model.reply(desk)
    handle = await routed(client, worker.task_queue)
    await question_waiting(handle)
    await handle.signal("answer", {"approved": True})
    await handle.result()

    report = await evaluate(client, model.plugin(), [handle.id], OPTIONS)

    [rerun] = report.runs
    assert rerun.skipped == (
        "it took input from outside while it ran (answer naming no question): a re-run "
        "would wait for it"
    )
