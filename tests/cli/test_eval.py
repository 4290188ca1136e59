"""`durafact eval` as a user runs it: runs recorded on the session's dev server with the
scripted model, re-run by the command on a dev server of its own with the current code,
and the calls that reach the scripted model counted.

The recipe is the root app's trip planner (tests/evaluation/trips_v1.py): one planning
call for the cities, then for each city the app's `forecast` activity and one model
call, which sees the days before it. Its second version (trips_v2.py) changes the
planner's prompt, and the scripted model answers that prompt with another third city
(tests/evaluation/__init__.py), whose forecast the recording does not have."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durafact._core.ids import OPAQUE_IDS_MEMO
from durafact._runtime.codec import converter_for, new_key, parse_keys
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact._service.evaluation import EvalOptions, evaluate
from durafact.testing import ScriptedModel
from tests.evaluation import NEW_CITIES, RECORDED_CITIES, trips
from tests.helpers import (
    ROOT,
    SCRIPTED_PRICES,
    Run,
    clean_env,
    scripted_cost,
    starter,
    with_converter,
)
from tests.workflows.test_plan_react import GOAL, act, final, script
from workflows.trips import Trip

V1 = "tests.evaluation.trips_v1"
V2 = "tests.evaluation.trips_v2"
TRIP = Trip(text="Baltic coast", days=3)
PLAN = "llm:plan:Baltic coast"


async def recorded_trip(client: Client, settings: Settings, model: ScriptedModel) -> str:
    """A run of the first version of the planner, closed: its workflow id."""
    model.reply(trips)
    workflow_id = f"trip-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, settings, recipes=[V1]):
        await client.execute_workflow(
            "TripPlanner", TRIP, id=workflow_id, task_queue=settings.task_queue
        )
    return workflow_id


def eval_env(client: Client, model: ScriptedModel, **extra: str) -> dict[str, str]:
    """The command on the session's server, changed requests to the scripted model,
    priced by SCRIPTED_PRICES."""
    return clean_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        OPENAI_BASE_URL=model.url,
        DURAFACT_MODEL="scripted",
        DURAFACT_PRICES=SCRIPTED_PRICES.model_dump_json(),
        **extra,
    )


async def durafact_eval(*args: str, env: dict[str, str]) -> Run:
    return await starter("eval", *args, env=env, cwd=ROOT, timeout=120)


def answered(report: dict[str, Any]) -> dict[str, str]:
    [run] = report["runs"]
    return {call["activity_id"]: call["answered"] for call in run["calls"]}


async def test_with_nothing_changed_every_model_request_is_answered_from_the_recording(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    workflow_id = await recorded_trip(client, settings, model)
    before = len(model.calls)

    run = await durafact_eval(workflow_id, "--recipes", V1, "--json", env=eval_env(client, model))

    assert run.code == 0, run.err
    assert len(model.calls) == before  # not one call reached the model
    report = json.loads(run.out)
    assert set(answered(report).values()) == {"recording"}
    assert report["totals"]["replayed"] == 4 and report["totals"]["sent"] == 0
    [rerun] = report["runs"]
    assert rerun["identical"] and rerun["new_output"] == rerun["old_output"]
    assert rerun["new_output"] == "\n".join(
        f"day {n}: a day in {city}" for n, city in enumerate(RECORDED_CITIES, 1)
    )
    assert rerun["tools"]["replayed"] == 3  # the forecasts


async def test_a_changed_planner_prompt_sends_only_the_changed_calls_and_their_dependants(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    workflow_id = await recorded_trip(client, settings, model)
    before = len(model.calls)

    run = await durafact_eval(
        workflow_id, "--recipes", V2, "--live-tools", "--score",
        "tests.evaluation.scores:days_kept", "--json", env=eval_env(client, model),
    )  # fmt: skip

    assert run.code == 0, run.err
    # The plan (its prompt changed) and the day in the city it changed; the first two
    # days are the same requests as recorded, so they are answered from the recording.
    sent = [call.activity_id for call in model.calls[before:]]
    assert sent == [PLAN, "llm:step:Baltic coast:2"]
    report = json.loads(run.out)
    assert answered(report) == {
        PLAN: "model",
        "llm:step:Baltic coast:0": "recording",
        "llm:step:Baltic coast:1": "recording",
        "llm:step:Baltic coast:2": "model",
    }
    [rerun] = report["runs"]
    why = {c["activity_id"]: (c["reasons"], c["because"]) for c in rerun["calls"]}
    assert why[PLAN] == (["prompt"], [])
    assert why["llm:step:Baltic coast:2"] == (["upstream"], [PLAN])
    assert rerun["new_output"] == "\n".join(
        f"day {n}: a day in {city}" for n, city in enumerate(NEW_CITIES, 1)
    )
    assert not rerun["identical"]
    assert rerun["score"] == pytest.approx(2 / 3)
    # What the two new calls used (the scripted model counts words): 10 + 23 in, 4 + 4 out.
    assert report["totals"]["sent_usage"] == {
        "prompt_tokens": 33,
        "completion_tokens": 8,
        "total_tokens": 41,
        "cost": f"{scripted_cost(33, 0, 8):f}",
        "currency": "USD",
    }
    assert report["totals"]["changed_outputs"] == 1


async def test_the_text_report_names_each_changed_call_and_shows_both_outputs(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    workflow_id = await recorded_trip(client, settings, model)

    run = await durafact_eval(
        workflow_id, "--recipes", V2, "--live-tools", env=eval_env(client, model)
    )

    assert run.code == 0, run.err
    assert run.out.splitlines() == [
        "1 run re-run on the current code (changed requests to model scripted)",
        "",
        f"{workflow_id} (TripPlanner)",
        "  4 model calls: 2 answered from the recording, 2 sent to the model",
        f"  {PLAN}: sent, prompt changed",
        f"  llm:step:Baltic coast:2: sent, upstream changed: {PLAN}",
        "  new calls: 41 tokens (33 in; 8 out); cost: 0.0001625 USD",
        "  output changed (old | new):",
        "    day 1: a day in Gdańsk               | day 1: a day in Gdańsk",
        "    day 2: a day in Toruń                | day 2: a day in Toruń",
        "    day 3: a day in Poznań               | day 3: a day in Kraków",
    ]


async def test_a_tool_answer_the_recording_lacks_is_not_made_up(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    """The new third city's forecast is not in the recording: without --live-tools the
    activity fails, and with it the re-run, which the report says."""
    workflow_id = await recorded_trip(client, settings, model)

    run = await durafact_eval(workflow_id, "--recipes", V2, "--json", env=eval_env(client, model))

    assert run.code == 0, run.err
    [rerun] = json.loads(run.out)["runs"]
    assert rerun["tools"] == {"replayed": 2, "missing": 1, "live": False}
    assert rerun["new_end"].startswith(
        "failed: NotRecorded: forecast with this input is not in the recording (["
    )
    assert rerun["new_end"].endswith("); --live-tools runs it")
    assert rerun["new_output"] is None
    assert rerun["dropped"] == ["llm:step:Baltic coast:2"]


async def test_offline_reports_the_changed_calls_and_sends_nothing(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    workflow_id = await recorded_trip(client, settings, model)
    before = len(model.calls)

    run = await durafact_eval(
        workflow_id, "--recipes", V2, "--offline", "--json", env=eval_env(client, model)
    )

    assert run.code == 0, run.err
    assert len(model.calls) == before
    report = json.loads(run.out)
    # The plan is not sent; it gets its recorded answer, so the days are the same
    # requests as recorded: only the calls the change touches itself are listed.
    assert answered(report) == {
        PLAN: "not sent",
        "llm:step:Baltic coast:0": "recording",
        "llm:step:Baltic coast:1": "recording",
        "llm:step:Baltic coast:2": "recording",
    }
    [rerun] = report["runs"]
    assert rerun["calls"][0]["reasons"] == ["prompt"]
    assert rerun["new_output"] is None and "offline" in rerun["new_end"]


async def test_runs_of_a_recipe_closed_since_a_time_are_found_by_the_recipe(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    workflow_id = await recorded_trip(client, settings, model)

    run = await durafact_eval(
        "--recipe", "TripPlanner", "--since", "1h", "--limit", "1", "--recipes", V1, "--offline",
        "--json", env=eval_env(client, model),
    )  # fmt: skip

    assert run.code == 0, run.err
    assert [r["workflow_id"] for r in json.loads(run.out)["runs"]] == [workflow_id]


async def test_an_encrypted_run_is_read_with_this_machines_keys_and_only_with_them(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    key = new_key("k1")
    encrypting = with_converter(client, converter_for(parse_keys([key], "test")))
    model.reply(trips)
    workflow_id = f"trip-{uuid.uuid4().hex[:8]}"
    async with build_worker(encrypting, settings, recipes=[V1]):
        await encrypting.execute_workflow(
            "TripPlanner", TRIP, id=workflow_id, task_queue=settings.task_queue,
            memo={OPAQUE_IDS_MEMO: True},
        )  # fmt: skip
    before = len(model.calls)

    keyed = await durafact_eval(
        workflow_id, "--recipes", V1, "--json", env=eval_env(client, model, DURAFACT_KEYS=key)
    )
    changed = await durafact_eval(
        workflow_id, "--recipes", V2, "--live-tools", env=eval_env(client, model, DURAFACT_KEYS=key)
    )
    keyless = await durafact_eval(workflow_id, "--recipes", V1, env=eval_env(client, model))

    assert keyed.code == 0, keyed.err
    [rerun] = json.loads(keyed.out)["runs"]
    assert rerun["identical"] and len(rerun["calls"]) == 4
    assert len(model.calls) == before + 2  # the second eval's plan and third day
    # Its activity ids are opaque (a hash): the report names the calls by their summaries.
    assert changed.code == 0, changed.err
    assert [line for line in changed.out.splitlines() if ": sent, " in line] == [
        "  request model: plan:Baltic coast: sent, prompt changed",
        "  request model: step:Baltic coast:2: sent, upstream changed: request model: "
        "plan:Baltic coast",
    ]
    assert keyless.code == 2 and keyless.out == ""
    assert keyless.err_lines == [
        f"starter: run {workflow_id}: payload is encrypted with key 'k1', but no keys are "
        "configured (set DURAFACT_KEYS or DURAFACT_KEYS_FILE)"
    ]


async def test_child_runs_and_tool_calls_are_answered_from_the_recording(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    """A plan whose steps are ReAct children calling the calculator: re-run with nothing
    changed, in this process, no model call is sent and no tool runs; with live tools,
    the calculator runs again."""
    from durafact._recipes import PlanReActInput, PlanReActWorkflow

    model.reply(script([act("3 * 12"), final("36")], [act("36 * 0.25"), final("9.00")]))
    workflow_id = f"plan-react-{uuid.uuid4().hex[:8]}"
    await client.execute_workflow(
        PlanReActWorkflow.run, PlanReActInput(text=GOAL), id=workflow_id,
        task_queue=worker.task_queue,
    )  # fmt: skip
    before = len(model.calls)
    plugin = model.plugin()

    replayed = await evaluate(client, plugin, [workflow_id], EvalOptions())
    live = await evaluate(client, plugin, [workflow_id], EvalOptions(live_tools=True))

    assert len(model.calls) == before
    for report, tools in ((replayed, 2), (live, 0)):
        [rerun] = report.runs
        assert rerun.identical, (rerun.old_output, rerun.new_output)
        assert rerun.count("recording") == 6 and rerun.count("model") == 0
        assert {call.workflow_id for call in rerun.calls} == {
            workflow_id,
            f"{workflow_id}/step:{GOAL}:0",
            f"{workflow_id}/step:{GOAL}:1",
        }
        assert rerun.tools.replayed == tools and rerun.tools.missing == 0


IDS_OR_RECIPE = "starter: eval: give the ids of closed runs, or --recipe R (not both)"
BAD_INPUT = [
    ([], IDS_OR_RECIPE),
    (["x", "--recipe", "trips"], IDS_OR_RECIPE),
    (["--recipe", "trips", "--limit", "0"], "starter: --limit 0: from 1 to 1000"),
    (["x", "--since", "2d"], "starter: --since goes with --recipe, not with run ids"),
    (
        ["--recipe", "trips", "--since", "last week"],
        "starter: --since 'last week': a duration (30m, 12h, 7d) or a date (2026-01-31)",
    ),
    (["--recipe", "a b"], "starter: --recipe 'a b': letters, digits, '_', '.', ':' and '-' only"),
    (["x", "--score", "no"], "starter: --score 'no': MODULE:FUNCTION, e.g. my_evals:score"),
    (
        ["x", "--score", "tests.evaluation.scores:missing"],
        "starter: --score tests.evaluation.scores:missing: tests.evaluation.scores has no "
        "function missing",
    ),
    (["x", "--timeout", "soon"], "starter: --timeout: 'soon' is not a duration (a whole number "
     "above 0 and s, m, h or d: 30s, 15m, 2h, 3d)"),
    (
        ["x", "--recipes", "no_such_module"],
        "starter: recipes module 'no_such_module' cannot be imported: ModuleNotFoundError: No "
        "module named 'no_such_module' (is it on PYTHONPATH, installed, or under the current "
        "directory?)",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("args", "line"), BAD_INPUT)
async def test_bad_input_is_one_line_before_anything_connects(
    args: list[str], line: str, tmp_path: Path
) -> None:
    # No server at all: nothing may be needed before the mistake is found.
    env = clean_env(TEMPORAL_ADDRESS="127.0.0.1:1", OPENAI_BASE_URL="http://127.0.0.1:1/v1")

    run = await durafact_eval(*args, env=env)

    assert (run.code, run.out, run.err_lines) == (2, "", [line])


async def test_runs_that_cannot_be_re_run_are_one_line(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    workflow_id = await recorded_trip(client, settings, model)
    waiting = await client.start_workflow(  # no worker polls its queue: it stays running
        "TripPlanner", TRIP, id=f"trip-{uuid.uuid4().hex[:8]}", task_queue="nobody-polls"
    )
    env = eval_env(client, model)
    try:
        unknown = await durafact_eval("no-such-run", "--recipes", V1, env=env)
        running = await durafact_eval(waiting.id, "--recipes", V1, env=env)
        unregistered = await durafact_eval(workflow_id, env=env)
        no_model = await durafact_eval(
            workflow_id, "--recipes", V1, env=eval_env(client, model) | {"OPENAI_BASE_URL": ""}
        )
    finally:
        await waiting.terminate("the test ended")

    assert (unknown.code, unknown.err_lines) == (1, ["starter: no workflow with id 'no-such-run'"])
    assert (running.code, running.err_lines) == (
        2,
        [f"starter: run {waiting.id} is still running: eval re-runs closed runs"],
    )
    assert (unregistered.code, unregistered.err_lines) == (
        2,
        [
            f"starter: run {workflow_id} is a TripPlanner, which is not registered here: load "
            "its recipes module (--recipes MODULE, DURAFACT_RECIPES)"
        ],
    )
    assert no_model.code == 1 and len(no_model.err_lines) == 1
    assert no_model.err_lines[0].startswith("starter: eval: changed requests go to a model: ")
    assert no_model.err_lines[0].endswith("; or --offline")
