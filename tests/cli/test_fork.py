"""`durafact fork ID --set ARTIFACT=VALUE | --edit ARTIFACT | --drop ARTIFACT` as a user runs
it: a what-if from a finished run that reruns only what depends on the edit, and a one-line
error, before anything starts, for what cannot be forked."""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path

from temporalio.client import Client

from durafact._core.forks import FORK_ID, FORKED_FROM
from durafact._recipes import Goal, PlanExecuteWorkflow
from durafact._runtime.settings import Settings
from durafact.testing import ScriptedModel
from tests.helpers import ledger_of, starter

GOAL = "Plan a weekend in Kraków"
RESULT = f"result:step:{GOAL}:1"


async def planned(env: dict[str, str], tmp_path: Path) -> str:
    workflow_id = f"plan-{uuid.uuid4().hex[:8]}"
    done = await starter("plan", GOAL, "--id", workflow_id, env=env, cwd=tmp_path)
    assert done.code == 0, done.err
    return workflow_id


async def test_fork_set_reruns_what_depends_on_the_edit_and_shows_the_new_answer(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    workflow_id = await planned(starter_env, tmp_path)
    full = len(model.calls)
    fork_id = f"{workflow_id}-hotel"

    done = await starter(
        "fork", workflow_id, "--set", f"{RESULT}=Hotel Wawel, two nights", "--id", fork_id,
        env=starter_env, cwd=tmp_path,
    )  # fmt: skip

    assert done.code == 0, done.err
    lines = done.out.splitlines()
    assert lines[0].startswith(f"forked workflow {fork_id} (run ")
    assert lines[0].endswith(f"from {workflow_id}: {RESULT}")
    assert f"  [starting] forked from {workflow_id} (run " in done.out
    assert f"  [executing:2/3] kept step:{GOAL}:1 from {workflow_id} (1 artifact)" in lines
    assert "     -> Hotel Wawel, two nights" in lines
    assert [c.activity_id for c in model.calls[full:]] == [
        f"llm:step:{GOAL}:2",
        f"llm:final:{GOAL}",
    ]
    ledger = await ledger_of(client.get_workflow_handle(fork_id))
    assert (RESULT, FORKED_FROM, FORK_ID) in {
        (x.source, x.relation, x.target) for x in ledger.links
    }


async def test_fork_edit_opens_the_artifacts_json_in_the_editor(
    starter_env: dict[str, str], model: ScriptedModel, tmp_path: Path
) -> None:
    workflow_id = await planned(starter_env, tmp_path)
    full = len(model.calls)
    editor = tmp_path / "editor.py"
    editor.write_text(
        textwrap.dedent(
            """
            import json, sys
            data = json.load(open(sys.argv[1]))
            assert data["description"] == "Compare options", data
            data["description"] = "Compare two hotels"
            json.dump(data, open(sys.argv[1], "w"))
            """
        )
    )
    env = {**starter_env, "EDITOR": f"{sys.executable} {editor}"}

    done = await starter("fork", workflow_id, "--edit", f"step:{GOAL}:1", env=env, cwd=tmp_path)

    assert done.code == 0, done.err
    assert "  2. Compare two hotels" in done.out.splitlines()
    assert "     -> done: Step 2: Compare two hotels" in done.out.splitlines()
    assert [c.activity_id for c in model.calls[full:]] == [
        f"llm:step:{GOAL}:1",
        f"llm:step:{GOAL}:2",
        f"llm:final:{GOAL}",
    ]


async def test_what_cannot_be_forked_is_one_line_before_anything_starts(
    starter_env: dict[str, str],
    client: Client,
    worker: Settings,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    workflow_id = await planned(starter_env, tmp_path)
    full = len(model.calls)
    bad_json = tmp_path / "bad.py"
    bad_json.write_text("import sys\nopen(sys.argv[1], 'w').write('{not json')\n")
    cases = [
        (["--set", "nope=x"], {}, 2, f"run {workflow_id} has no artifact 'nope'"),
        (["--set", "no-equals-sign"], {}, 2, "--set 'no-equals-sign': expected ARTIFACT=VALUE"),
        ([], {}, 2, "fork: say what changes: --set ARTIFACT=VALUE, --edit ARTIFACT or --drop"),
        (["--edit", RESULT], {}, 2, "--edit: set EDITOR (or VISUAL) to the command of your"),
        (
            ["--edit", RESULT],
            {"EDITOR": f"{sys.executable} {bad_json}"},
            2,
            f"--edit: {RESULT} is no longer JSON (Expecting property name enclosed in double "
            "quotes, line 1 column 2): nothing was forked",
        ),
    ]
    for options, env, code, message in cases:
        done = await starter(
            "fork", workflow_id, *options, env={**starter_env, **env}, cwd=tmp_path
        )
        assert done.code == code, done.err
        assert len(done.err_lines) == 1, done.err
        assert done.err.startswith(f"starter: {message}"), done.err
        assert done.out == ""

    release = model.hold(lambda call: call.schema_name == "Plan")
    running = await client.start_workflow(
        PlanExecuteWorkflow.run, Goal(text=GOAL), id=f"plan-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )  # fmt: skip
    try:
        done = await starter(
            "fork", running.id, "--set", f"{RESULT}=x", env=starter_env, cwd=tmp_path
        )
        assert done.code == 1
        assert done.err_lines == [
            f"starter: workflow {running.id} is still running: fork it once it has ended"
        ]
    finally:
        release.set()
    await running.result()
    assert [c for c in model.calls[full:] if c.workflow_id != running.id] == []
