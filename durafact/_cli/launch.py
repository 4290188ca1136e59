"""`start TYPE --input JSON|@FILE` and every recipe command: a launch (built by the
service layer, durafact/_service/launch.py) started, then followed.

`start` starts it with id conflict policy USE_EXISTING: the same `--id` while it runs
attaches to that run, after it completed shows its result, after a failure runs it
again.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from durafact._cli.follow import wait_and_print, warn_if_no_worker
from durafact._cli.output import ANSWER_HINT, Failed, emit_json, note, quoted, say
from durafact._runtime.registry import Registry
from durafact._runtime.settings import Settings
from durafact._service.inputs import MAX_INPUT_BYTES, MAX_INPUT_DEPTH, depth
from durafact._service.launch import (
    Launch,
    input_kind,
    launch_of_input,
    registered_type,
    start_run,
)
from durafact._service.runs import state_name


def launch_of_type(registry: Registry, type_name: str, given: str | None) -> Launch:
    """`start TYPE --input ...`: the registered type, its input read and validated."""
    recipe = registered_type(registry, type_name)
    kind = input_kind(recipe, given is not None)
    return launch_of_input(recipe, kind, read_input(given) if given is not None else None)


def read_input(given: str) -> Any:
    """`--input`: JSON text, or `@FILE` (`@-` reads standard input), parsed."""
    where = "--input"
    text = given
    if given.startswith("@"):
        name = given[1:]
        where = f"--input {given}"
        try:
            # One byte past the cap is enough to know the input is too large.
            if name == "-":
                raw = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
            else:
                with Path(name).open("rb") as handle:
                    raw = handle.read(MAX_INPUT_BYTES + 1)
            if len(raw) > MAX_INPUT_BYTES:
                raise Failed(
                    f"--input: {name} is over {MAX_INPUT_BYTES:,} bytes, more than a workflow "
                    "input may hold; put large content in a source and pass its location",
                    code=2,
                )
            text = raw.decode("utf-8")
        except OSError as exc:
            raise Failed(f"--input: cannot read {name}: {exc.strerror}", code=2) from None
        except UnicodeDecodeError as exc:
            raise Failed(f"--input: cannot read {name}: {exc.reason}", code=2) from None
    too_deep = Failed(f"{where} is nested more than {MAX_INPUT_DEPTH} levels deep", code=2)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Failed(
            f"{where} is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", code=2
        ) from None
    except RecursionError:
        raise too_deep from None
    except ValueError:  # the only other one json raises: an integer past 4300 digits
        too_long = f"{where} holds a number too long to read (over 4300 digits)"
        raise Failed(too_long, code=2) from None
    if depth(data) > MAX_INPUT_DEPTH:
        raise too_deep
    return data


async def start(
    client: Any,
    settings: Settings,
    launch: Launch,
    workflow_id: str,
    no_wait: bool,
    as_json: bool,
    model_deadline: timedelta | None = None,
) -> int:
    """Start the launch (or attach to the run with that id) and follow it; `model_deadline`
    is how long its model calls may retry, instead of the recipe's default."""
    summary = launch.summary
    run = await start_run(client, settings, launch, workflow_id, model_deadline)
    handle, run_id, started, description = run.handle, run.run_id, run.started, run.description
    state = state_name(description)
    url = settings.workflow_url(workflow_id, run_id)
    if not started:
        existing = await description.static_summary()
        if existing and existing != summary:
            note(f"starter: note: workflow {workflow_id} was started for {existing!r}; using it")
    if no_wait:
        if state == "RUNNING":
            await warn_if_no_worker(client, settings, description.task_queue)
        if as_json:
            emit_json(workflow_id, run_id, state, None, url)
        else:
            if started:
                say(f"started workflow {workflow_id} (run {run_id})")
            else:
                say(f"workflow {workflow_id} already exists ({state}, run {run_id})")
            say(f"Web UI: {url}")
            say(f"result: durafact result {quoted(workflow_id)}")
            if launch.asks_approval:
                say(f"answer: durafact approve {quoted(workflow_id)} {ANSWER_HINT}")
        return 0
    if not as_json:
        if started:
            say(f"started workflow {workflow_id} (run {run_id})")
        elif state == "RUNNING":
            say(f"attached to the running workflow {workflow_id} (run {run_id})")
        else:
            say(f"workflow {workflow_id} already finished ({state}, run {run_id}); its result:")
        say(f"Web UI: {url}")
    return await wait_and_print(
        client, settings, handle, description, run_id, url, as_json, launch.recipe
    )
