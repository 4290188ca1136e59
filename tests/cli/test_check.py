"""`durafact check`: the runs of a namespace, or exported histories, replayed against the
code about to be deployed, as a user runs it before a deploy.

Each test records runs on a dev server of its own (so that what `check` finds is what
the test started) with an in-process worker and the scripted model, then runs `durafact
check` as a command: with today's code, with a copy of a recipe whose hooks are
reordered (v2), and with the same change under `workflow.patched`. The recipe is a small
module written to a directory per version; `check --recipes notes_...` in that directory
registers that version, as a deploy's CI would.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from durafact._cli.arguments import since
from durafact._local.embedded import temporal_binary
from durafact._recipes import Goal, PlanExecuteWorkflow, SupervisorRequest, SupervisorWorkflow
from durafact._runtime.codec import data_converter, new_key
from durafact._runtime.registry import load_registry
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact._service.check import runs_filter, runs_to_check
from durafact.testing import ScriptedModel, default_reply, start_dev_server, waiting_question
from tests.helpers import ROOT, Run, clean_env, free_port, run_command, starter, with_converter
from tests.workflows.test_supervisor import specialist

HISTORIES = sorted((ROOT / "tests" / "histories").rglob("*.json"))

# A recipe of two model calls, each in a scope of its own (`llm:outline`, `llm:draft`),
# then a person's approval: a run of it waits, as runs in flight do during a deploy.
NOTES = """
from pydantic import BaseModel
from temporalio import workflow

from durafact import Recipe, RecipeContext


class Topic(BaseModel):
    text: str


class Note(BaseModel):
    outline: str
    text: str
    published: bool


@workflow.defn
class NoteWriter(Recipe[Topic, Note]):
    @workflow.run
    async def run(self, topic: Topic) -> Note:
        return await self.execute(topic)

    async def lifecycle(self, ctx: RecipeContext, topic: Topic) -> Note:
{body}
        outcome = await ctx.ask_approval("publish", f"Publish the note on {{topic.text}}?")
        return Note(outline=outline, text=text, published=outcome.approved)


RECIPES = [NoteWriter]
"""
OUTLINE_FIRST = """
with ctx.scoped("outline"):
    outline = await ctx.llm.text(f"Outline a note on {topic.text}")
with ctx.scoped("draft"):
    text = await ctx.llm.text(f"Write the note: {outline}")
"""
# v2: the two hooks swapped, the draft written first.
DRAFT_FIRST = """
with ctx.scoped("draft"):
    text = await ctx.llm.text(f"Write a note on {topic.text}")
with ctx.scoped("outline"):
    outline = await ctx.llm.text(f"Outline the note: {text}")
"""
# The same change, for new runs only.
PATCHED = (
    'if workflow.patched("draft-first"):\n'
    + textwrap.indent(DRAFT_FIRST.strip("\n"), "    ")
    + "\nelse:\n"
    + textwrap.indent(OUTLINE_FIRST.strip("\n"), "    ")
    + "\n"
)
# A bug that only a recorded answer shows: the model's outline is no number.
BROKEN = OUTLINE_FIRST.replace(
    "text = await", "text = await ctx.llm.text(str(int(outline)))\n    text = await"
)
# A wait inserted before the first call: a timer where the run scheduled an activity.
WAITS = "await workflow.sleep(60)\n" + OUTLINE_FIRST.lstrip("\n")
VERSIONS = {
    "v1": OUTLINE_FIRST,
    "v2": DRAFT_FIRST,
    "patched": PATCHED,
    "broken": BROKEN,
    "waits": WAITS,
}


def write_version(root: Path, module: str, version: str) -> Path:
    """The recipes module `module` as `version` has it, in a directory of that version's
    own: where `check --recipes MODULE` runs to register it."""
    folder = root / version
    folder.mkdir(exist_ok=True)
    body = textwrap.indent(VERSIONS[version].strip("\n"), " " * 8)
    (folder / f"{module}.py").write_text(NOTES.format(body=body))
    return folder


@pytest.fixture
async def server() -> AsyncIterator[WorkflowEnvironment]:
    """A dev server of the test's own: `check` sees only the runs the test started."""
    environment = await start_dev_server()
    try:
        yield environment
    finally:
        await environment.shutdown()


@pytest.fixture
def notes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The name of this test's recipes module (its own: the test process keeps every
    module it imports), v1 importable by the in-process worker."""
    module = f"notes_{uuid.uuid4().hex[:8]}"
    monkeypatch.syspath_prepend(str(write_version(tmp_path, module, "v1")))
    return module


def at(text: str) -> datetime:
    return since(text, "--since")


def env_for(server: WorkflowEnvironment, **extra: str) -> dict[str, str]:
    return clean_env(TEMPORAL_ADDRESS=server.client.service_client.config.target_host, **extra)


async def check(*args: str, env: dict[str, str], cwd: Path = ROOT) -> Run:
    return await starter("check", *args, env=env, cwd=cwd, timeout=120)


async def start_note(client: Client, settings: Settings, topic: str) -> WorkflowHandle:
    """A NoteWriter run, once it waits for its approval (both model calls made)."""
    handle = await client.start_workflow(
        "NoteWriter",
        {"text": topic},
        id=f"note-{uuid.uuid4().hex[:6]}",
        task_queue=settings.task_queue,
    )
    await waiting_question(handle)
    return handle


async def visible(client: Client, count: int) -> None:
    """Until visibility lists `count` runs with their recipe: what `check` looks up."""
    async with asyncio.timeout(30):
        while True:
            found = [e async for e in client.list_workflows("DurafactRecipe IS NOT NULL")]
            if len(found) >= count:
                return
            await asyncio.sleep(0.1)


async def scheduled_event(handle: WorkflowHandle, activity_id: str) -> int:
    """The id of the event that scheduled the activity `activity_id`."""
    history = await handle.fetch_history()
    return next(
        e.event_id
        for e in history.events
        if e.activity_task_scheduled_event_attributes.activity_id == activity_id
    )


# --- today's code ---------------------------------------------------------------------


async def test_runs_recorded_with_todays_code_all_match(
    server: WorkflowEnvironment, settings: Settings, model: ScriptedModel
) -> None:
    client = server.client
    route = specialist()
    model.reply(lambda call: default_reply(call) if call.schema_name == "Plan" else route(call))
    async with build_worker(client, settings):
        await client.execute_workflow(
            PlanExecuteWorkflow.run,
            Goal(text="Plan a weekend in Kraków"),
            id="plan-1",
            task_queue=settings.task_queue,
        )
        waiting = await client.start_workflow(
            SupervisorWorkflow.run,
            SupervisorRequest(request="Renovate the kitchen for 3000 EUR"),
            id="route-1",
            task_queue=settings.task_queue,
        )
        await waiting_question(waiting)
    await visible(client, 2)
    env = env_for(server)

    run = await check(env=env)
    assert (run.code, run.out, run.err) == (0, "2 runs replayed, all match\n", "")

    run = await check("--json", env=env)
    assert run.code == 0, run.err
    report = json.loads(run.out)
    assert report["ok"] is True
    assert report["counts"] == {"match": 2, "diverges": 0, "fails": 0, "not_registered": 0}
    assert report["more"] is False
    # The run in flight first: it is the one a deploy moves onto the new code.
    assert [(r["workflow_id"], r["state"], r["outcome"]) for r in report["runs"]] == [
        ("route-1", "RUNNING", "match"),
        ("plan-1", "COMPLETED", "match"),
    ]
    assert set(report["runs"][0]) == {
        "workflow_id", "run_id", "workflow_type", "state", "file", "outcome",
        "event_id", "event_type", "recorded", "now", "cause", "error",
    }  # fmt: skip

    run = await check("--recipe", "plan_execute", env=env)
    assert (run.code, run.out) == (0, "1 run replayed, all match\n"), run.err

    # --recipe keeps one recipe's runs (its name or its workflow type); --since keeps the
    # closed runs that closed since then, and every running one; --limit, the first.
    registry = load_registry(entry_points=False)
    everything = runs_filter(registry, None)
    for query, closed_since, limit, expected in [
        (runs_filter(registry, "plan_execute"), None, 100, ["plan-1"]),
        (runs_filter(registry, "SupervisorWorkflow"), None, 100, ["route-1"]),
        (everything, at("2999-01-01"), 100, ["route-1"]),
        (everything, at("1d"), 100, ["route-1", "plan-1"]),
        (everything, None, 1, ["route-1"]),
    ]:
        found, more = await runs_to_check(client, query, closed_since, limit)
        assert [e.id for e in found] == expected, (query, closed_since, limit)
        assert more is (limit == 1)


# --- a changed recipe -----------------------------------------------------------------


@pytest.fixture
async def note_run(server: WorkflowEnvironment, settings: Settings, notes: str) -> WorkflowHandle:
    """A NoteWriter run recorded by v1, waiting for its approval."""
    client = server.client
    async with build_worker(client, settings, recipes=[notes]):
        handle = await start_note(client, settings, "durable agents")
    await visible(client, 1)
    return handle


async def test_a_recipe_with_its_hooks_reordered_fails_naming_the_run_and_the_event(
    server: WorkflowEnvironment, note_run: WorkflowHandle, notes: str, tmp_path: Path
) -> None:
    v2 = write_version(tmp_path, notes, "v2")
    env = env_for(server)

    run = await check("--recipes", notes, env=env, cwd=v2)
    assert run.code == 1, run.err
    event = await scheduled_event(note_run, "llm:outline")
    assert run.out.splitlines() == [
        f"{note_run.id} (NoteWriter, running, run {note_run.first_execution_run_id}) diverges "
        f"at event {event} (ActivityTaskScheduled)",
        "  the run recorded: activity llm:outline (request_model)",
        "  the code now: activity llm:draft",
        "  likely cause: a hook or call added, removed or reordered before it, without "
        "`workflow.patched`",
        "1 run checked: 1 diverges",
    ]

    run = await check("--recipes", notes, "--json", env=env, cwd=v2)
    assert run.code == 1
    report = json.loads(run.out)
    assert report["ok"] is False
    assert report["counts"] == {"match": 0, "diverges": 1, "fails": 0, "not_registered": 0}
    [found] = report["runs"]
    assert (found["workflow_id"], found["state"], found["outcome"]) == (
        note_run.id,
        "RUNNING",
        "diverges",
    )
    assert (found["event_id"], found["event_type"]) == (event, "ActivityTaskScheduled")
    assert (found["recorded"], found["now"]) == (
        "activity llm:outline (request_model)",
        "activity llm:draft",
    )
    assert "'llm:outline' does not match" in found["error"]

    # The code that recorded it matches.
    run = await check("--recipes", notes, env=env, cwd=tmp_path / "v1")
    assert (run.code, run.out) == (0, "1 run replayed, all match\n")


async def test_a_wait_inserted_before_a_call_is_named(
    server: WorkflowEnvironment, note_run: WorkflowHandle, notes: str, tmp_path: Path
) -> None:
    waits = write_version(tmp_path, notes, "waits")
    run = await check("--recipes", notes, env=env_for(server), cwd=waits)
    assert run.code == 1, run.err
    event = await scheduled_event(note_run, "llm:outline")
    assert run.out.splitlines()[0].endswith(f"diverges at event {event} (ActivityTaskScheduled)")
    assert run.out.splitlines()[1:4] == [
        "  the run recorded: activity llm:outline (request_model)",
        "  the code now: a timer (a sleep, or a wait with a timeout)",
        "  likely cause: a step added, removed or reordered before it, without `workflow.patched`",
    ]


async def test_code_that_raises_on_a_recorded_answer_is_named_with_its_line(
    server: WorkflowEnvironment, note_run: WorkflowHandle, notes: str, tmp_path: Path
) -> None:
    broken = write_version(tmp_path, notes, "broken")
    lines = (broken / f"{notes}.py").read_text().splitlines()
    line = next(n for n, text in enumerate(lines, start=1) if "int(outline)" in text)
    run = await check("--recipes", notes, env=env_for(server), cwd=broken)
    assert run.code == 1, run.err
    said = run.out.splitlines()
    assert said[0].startswith(f"{note_run.id} (NoteWriter, running")
    assert said[0].endswith(") fails to replay")
    assert said[1].startswith("  the code now: raises ValueError: invalid literal for int()")
    assert said[1].endswith(f"({notes}.py:{line}, in lifecycle)")
    assert said[-1] == "1 run checked: 1 fails to replay"


async def test_a_run_whose_recipe_is_not_registered_here_is_named(
    server: WorkflowEnvironment, note_run: WorkflowHandle, tmp_path: Path
) -> None:
    run = await check(env=env_for(server), cwd=tmp_path)  # without --recipes
    assert run.code == 1, run.err
    said = run.out.splitlines()
    assert said[0].startswith(f"{note_run.id} (NoteWriter, running")
    assert said[0].endswith(") is not registered here")
    assert "register its recipes module (--recipes MODULE" in said[1]
    assert said[-1] == "1 run checked: 1 not registered"


async def test_the_same_change_under_workflow_patched_passes(
    server: WorkflowEnvironment, note_run: WorkflowHandle, notes: str, tmp_path: Path
) -> None:
    patched = write_version(tmp_path, notes, "patched")
    run = await check("--recipes", notes, env=env_for(server), cwd=patched)
    assert (run.code, run.out, run.err) == (0, "1 run replayed, all match\n", "")


async def test_a_patch_removed_while_runs_recorded_it_is_named(
    server: WorkflowEnvironment, settings: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    """A run recorded by the patched code, replayed by code without the patch (v1 again,
    say, after a rollback): the marker it recorded has no `workflow.patched` now."""
    client = server.client
    module = f"notes_{uuid.uuid4().hex[:8]}"
    patched = write_version(tmp_path, module, "patched")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(patched))
        async with build_worker(client, settings, recipes=[module]):
            handle = await start_note(client, settings, "durable agents")
    await visible(client, 1)

    run = await check(
        "--recipes",
        module,
        "--json",
        env=env_for(server),
        cwd=write_version(tmp_path, module, "v1"),
    )
    assert run.code == 1, run.err
    [found] = json.loads(run.out)["runs"]
    history = await handle.fetch_history()
    marker = next(e for e in history.events if e.marker_recorded_event_attributes.marker_name)
    assert (found["event_id"], found["event_type"]) == (marker.event_id, "MarkerRecorded")
    assert found["recorded"] == "`workflow.patched('draft-first')`"
    assert "no longer calls `workflow.patched('draft-first')`" in found["cause"]


# --- histories exported to files ------------------------------------------------------


async def test_exported_histories_are_checked_offline(
    server: WorkflowEnvironment, settings: Settings, notes: str, tmp_path: Path
) -> None:
    # Nothing listens at the address: a check of files never connects.
    offline = clean_env(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")
    run = await check("--history", *map(str, HISTORIES), env=offline)
    assert (run.code, run.out, run.err) == (0, f"{len(HISTORIES)} runs replayed, all match\n", "")

    # A run of this test's own, exported as a user would: `temporal workflow show`.
    client = server.client
    async with build_worker(client, settings, recipes=[notes]):
        handle = await start_note(client, settings, "durable agents")
    exported = tmp_path / "note.json"
    show = await run_command(
        str(temporal_binary()), "workflow", "show", "--workflow-id", handle.id,
        "--address", client.service_client.config.target_host, "--output", "json",
        env=clean_env(), cwd=tmp_path,
    )  # fmt: skip
    assert show.code == 0, show.err
    exported.write_text(show.out)
    await server.shutdown()  # offline indeed

    run = await check(
        "--recipes", notes, "--history", str(exported), env=offline, cwd=tmp_path / "v1"
    )
    assert (run.code, run.out) == (0, "1 run replayed, all match\n"), run.err
    v2 = write_version(tmp_path, notes, "v2")
    run = await check("--recipes", notes, "--history", str(exported), "--json", env=offline, cwd=v2)
    assert run.code == 1, run.err
    [found] = json.loads(run.out)["runs"]
    assert (found["file"], found["workflow_id"], found["state"]) == (str(exported), handle.id, None)
    assert (found["outcome"], found["event_type"]) == ("diverges", "ActivityTaskScheduled")
    assert found["now"] == "activity llm:draft"


# --- encrypted payloads ---------------------------------------------------------------


async def test_encrypted_runs_replay_with_the_workers_keys(
    server: WorkflowEnvironment, settings: Settings
) -> None:
    keys = new_key("k1")
    client = with_converter(server.client, data_converter({"DURAFACT_KEYS": keys}))
    async with build_worker(client, settings):
        await client.execute_workflow(
            PlanExecuteWorkflow.run, Goal(text="Plan a weekend in Kraków"), id="secret",
            task_queue=settings.task_queue,
        )  # fmt: skip
    await visible(server.client, 1)

    run = await check(env=env_for(server, DURAFACT_KEYS=keys))
    assert (run.code, run.out, run.err) == (0, "1 run replayed, all match\n", "")
    # Without them, the run cannot be read: said, not a crash.
    run = await check(env=env_for(server))
    assert run.code == 1, run.err
    assert "secret (PlanExecuteWorkflow, completed" in run.out
    assert "cannot read the run: payload is encrypted with key 'k1'" in run.out, run.out
    assert "give it the workers' keys (DURAFACT_KEYS or DURAFACT_KEYS_FILE)" in run.out
    assert run.out.splitlines()[-1] == "1 run checked: 1 fails to replay"


# --- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--recipe", "nope"],
            "--recipe nope: no registered recipe has that name or workflow type",
        ),
        (["--since", "yesterday"], "--since 'yesterday': a duration (30m, 12h, 7d) or a date"),
        (["--limit", "0"], "--limit 0: from 1 to 1000"),
        (["--recipes", "nowhere_to_be_found"], "recipes module 'nowhere_to_be_found' cannot be"),
        (["--history", "missing.json"], "--history missing.json: No such file or directory"),
        (["--history", "pyproject.toml"], "--history pyproject.toml: not a workflow history"),
        (
            ["--history", str(HISTORIES[0]), "--recipe", "chat"],
            "--history replays the files it names: --recipe chooses runs of the server",
        ),
    ],
    ids=["recipe", "since", "limit", "recipes", "missing", "not-a-history", "history-and-recipe"],
)
async def test_bad_input_is_one_line_before_anything_runs(args: list[str], error: str) -> None:
    # Nothing listens at the address: the mistake is said before connecting.
    env = clean_env(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")
    run = await check(*args, env=env)
    assert run.code == 2
    assert run.out == ""
    assert len(run.err_lines) == 1 and run.err.startswith("starter: "), run.err
    assert error in run.err
