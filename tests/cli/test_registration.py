"""A user's own recipe in a package outside the repository, as a user runs it.

The package is written to a temporary directory: a PlanExecute recipe whose `plan`
asks the (scripted) model for its own output model. It is registered by module path
(`--recipes`, DURAFACT_RECIPES) or by an entry point of an installed distribution,
run by a worker process (`durafact-worker`, `durafact-worker`), and started with
`durafact start TYPE --input ...` and the `durafact start ...` console
script. Bad input and bad registration are one line and start nothing.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import json
import os
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durafact._activities.tools import ToolCatalog
from durafact._core.llm import type_path
from durafact._core.tools import ToolCall, ToolRequest
from durafact._recipes.recipe import RECIPE_ATTRIBUTE
from durafact._runtime.connection import has_live_poller
from durafact._runtime.registry import (
    RegistrationError,
    builtin_registry,
    load_registry,
    recipe_modules,
)
from durafact.testing import Call, ScriptedModel
from tests.helpers import (
    DURAFACT_WORKER,
    ROOT,
    Run,
    clean_env,
    free_port,
    run_command,
    said_until,
    starter,
)

BIN = Path(sys.executable).parent
TRIP = {"text": "Baltic coast", "days": 2}
ITINERARY = {"trip": "Baltic coast", "days": ["day 1: walk Gdańsk", "day 2: walk Toruń"]}

RECIPES = """
from pydantic import BaseModel, Field
from temporalio import workflow

from durafact import PlanExecute, RecipeContext


class Trip(BaseModel):
    text: str
    days: int = Field(ge=1, le=5)


class Day(BaseModel):
    goal: str = ""
    index: int = 0
    city: str


class DayPlan(BaseModel):
    goal: str = ""
    index: int = 0
    text: str


class Itinerary(BaseModel):
    trip: str
    days: list[str]


class Cities(BaseModel):
    cities: list[str]


@workflow.defn
class TripPlanner(PlanExecute[Trip, Day, DayPlan, Itinerary]):
    @workflow.run
    async def run(self, trip: Trip) -> Itinerary:
        return await self.execute(trip)

    async def plan(self, ctx: RecipeContext, trip: Trip) -> list[Day]:
        cities = await ctx.llm.structured(Cities, f"{trip.days} cities for: {trip.text}")
        return [Day(city=city) for city in cities.cities[: trip.days]]

    async def execute_step(self, ctx: RecipeContext, day: Day, history: list[DayPlan]) -> DayPlan:
        return DayPlan(text=f"day {day.index + 1}: walk {day.city}")

    async def finish(self, ctx: RecipeContext, trip: Trip, results: list[DayPlan]) -> Itinerary:
        return Itinerary(trip=trip.text, days=[r.text for r in results])


RECIPES = [TripPlanner]
OUTPUT_MODELS = [Cities]
"""

# A second recipes module whose author forgot to register its output model.
FORGETFUL = """
from pydantic import BaseModel
from temporalio import workflow

from trips.recipes import Day, Itinerary, Trip, TripPlanner


class Towns(BaseModel):
    towns: list[str]


@workflow.defn
class ForgetfulPlanner(TripPlanner):
    @workflow.run
    async def run(self, trip: Trip) -> Itinerary:
        return await self.execute(trip)

    async def plan(self, ctx, trip: Trip) -> list[Day]:
        towns = await ctx.llm.structured(Towns, trip.text)
        return [Day(city=town) for town in towns.towns]


RECIPES = [ForgetfulPlanner]
"""

MISTAKES = {
    "empty": "PLANS = []\n",
    "not_a_workflow": "from trips.recipes import Trip\n\nRECIPES = [Trip]\n",
    "clash": textwrap.dedent(
        """
        from temporalio import workflow

        @workflow.defn
        class PlanExecuteWorkflow:
            @workflow.run
            async def run(self, goal: dict) -> dict:
                return goal

        RECIPES = [PlanExecuteWorkflow]
        """
    ),
    "broken": "import nowhere_to_be_found\n",
}


@pytest.fixture
def src(tmp_path: Path) -> Path:
    """A directory outside the repository holding the user's package `trips`."""
    root = tmp_path / "src"
    package = root / "trips"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "recipes.py").write_text(RECIPES)
    (package / "forgetful.py").write_text(FORGETFUL)
    for name, text in MISTAKES.items():
        (package / f"{name}.py").write_text(text)
    return root


def install_entry_point(root: Path, module: str) -> None:
    """An installed distribution `trips-dist` declaring `module` in `durafact.recipes`:
    its dist-info directory on a path that is on PYTHONPATH, as pip would leave it."""
    info = root / "trips_dist-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: trips-dist\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[durafact.recipes]\ntrips = {module}\n")


def tour(call: Call) -> str | dict:
    if call.schema_name == "Cities":
        return {"cities": ["Gdańsk", "Toruń", "Poznań"]}
    return "unused"


@pytest.fixture
def user_env(env: WorkflowEnvironment, model: ScriptedModel) -> dict[str, str]:
    """The session server, a task queue of this test's own, the scripted model."""
    model.reply(tour)
    return clean_env(
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        DURAFACT_TASK_QUEUE=f"user-{uuid.uuid4().hex[:8]}",
        OPENAI_BASE_URL=model.url,
        OPENAI_API_KEY="test",
        DURAFACT_MODEL="scripted",
    )


@asynccontextmanager
async def worker_process(
    client: Client, argv: list[str], env: dict[str, str], cwd: Path
) -> AsyncIterator[None]:
    """A worker process, once it polls the task queue; stopped (SIGTERM) afterwards."""
    process = await asyncio.create_subprocess_exec(
        *argv, env=env, cwd=cwd, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        queue = env["DURAFACT_TASK_QUEUE"]
        while not await has_live_poller(client, client.namespace, queue, f"{process.pid}@"):
            assert process.returncode is None, (await process.stderr.read()).decode()
            assert loop.time() < deadline, "the worker did not poll in time"
            await asyncio.sleep(0.1)
        yield
    finally:
        if process.returncode is None:
            process.terminate()
        _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()


async def durafact(*args: str, env: dict[str, str], cwd: Path, timeout: float = 60) -> Run:
    """The installed console script `durafact`."""
    return await run_command(str(BIN / "durafact"), *args, env=env, cwd=cwd, timeout=timeout)


async def executions(client: Client, queue: str) -> list[str]:
    return [w.id async for w in client.list_workflows(f'TaskQueue="{queue}"')]


# --- registered by module path ----------------------------------------------------------


async def test_a_recipe_registered_by_module_path_runs_and_starts_by_its_type(
    client: Client, user_env: dict[str, str], model: ScriptedModel, src: Path, tmp_path: Path
) -> None:
    # The console-script worker, run in the package's directory: found from there.
    worker = [str(BIN / "durafact-worker"), "--recipes", "trips.recipes,trips.forgetful"]
    on_path = user_env | {"PYTHONPATH": str(src)}
    async with worker_process(client, worker, user_env, cwd=src):
        run = await starter(
            "start", "TripPlanner", "--input", json.dumps(TRIP), "--recipes", "trips.recipes",
            "--json", env=on_path, cwd=tmp_path,
        )  # fmt: skip
        (tmp_path / "trip.json").write_text(json.dumps(TRIP))
        console = await durafact(
            "start", "TripPlanner", "--input", f"@{tmp_path / 'trip.json'}",
            env=user_env | {"DURAFACT_RECIPES": "trips.recipes"}, cwd=src,
        )  # fmt: skip
        forgot = await starter(
            "start", "ForgetfulPlanner", "--input", json.dumps(TRIP),
            env=on_path | {"DURAFACT_RECIPES": "trips.forgetful"}, cwd=tmp_path,
        )  # fmt: skip

    assert run.code == 0, run.err
    assert run.err == ""
    doc = json.loads(run.out)
    assert (doc["status"], doc["result"]) == ("COMPLETED", ITINERARY)
    assert doc["workflow_id"].startswith("TripPlanner-")
    description = await client.get_workflow_handle(doc["workflow_id"]).describe()
    assert description.workflow_type == "TripPlanner"
    assert await description.static_summary() == "TripPlanner: Baltic coast"
    assert description.typed_search_attributes.get(RECIPE_ATTRIBUTE) == "plan_execute"
    # Its own output model was asked for by name and served by the registry.
    assert [c.schema_name for c in model.calls][:1] == ["Cities"]

    assert console.code == 0, console.err
    lines = console.out.splitlines()
    assert lines[0].startswith("started workflow TripPlanner-")
    assert "  [planning] planning: Baltic coast" in lines
    assert "  [completed] completed" in lines
    printed = console.out[console.out.index("{") : console.out.rindex("}") + 1]
    assert json.loads(printed) == ITINERARY
    assert lines[-1].startswith("Web UI: ")

    assert forgot.code == 1
    assert forgot.err_lines == [
        f"starter: workflow {forgot.out.split()[2]} failed: UnknownOutputType: output type "
        "'trips.forgetful:Towns' is not registered with this worker: list the model in "
        "OUTPUT_MODELS of the recipes module that lists the workflow, and load that module on "
        "the worker (--recipes MODULE, DURAFACT_RECIPES, or an entry point in the group "
        "durafact.recipes)"
    ]


async def test_result_and_attach_know_a_registered_recipe(
    client: Client, user_env: dict[str, str], src: Path, tmp_path: Path
) -> None:
    env = user_env | {"PYTHONPATH": str(src), "DURAFACT_RECIPES": "trips.recipes"}
    workflow_id = f"trip-{uuid.uuid4().hex[:6]}"
    start = ["start", "TripPlanner", "--input", json.dumps(TRIP), "--id", workflow_id]
    async with worker_process(client, [*DURAFACT_WORKER], env, cwd=ROOT):
        started = await starter(*start, "--no-wait", env=env, cwd=tmp_path)
        result = await starter("result", workflow_id, "--json", env=env, cwd=tmp_path)
        again = await starter(*start, "--json", env=env, cwd=tmp_path)

    assert started.code == 0, started.err
    assert f"started workflow {workflow_id}" in started.out
    assert result.code == 0, result.err
    assert json.loads(result.out)["result"] == ITINERARY
    assert again.code == 0, again.err
    assert json.loads(again.out)["run_id"] == json.loads(result.out)["run_id"]
    assert await executions(client, env["DURAFACT_TASK_QUEUE"]) == [workflow_id]


# --- registered by an entry point --------------------------------------------------------


async def test_a_recipe_registered_by_an_installed_entry_point_needs_no_option(
    client: Client, user_env: dict[str, str], src: Path, tmp_path: Path
) -> None:
    install_entry_point(src, "trips.recipes")
    env = user_env | {"PYTHONPATH": str(src)}
    async with worker_process(client, [*DURAFACT_WORKER], env, cwd=ROOT):
        console = await durafact(
            "start", "TripPlanner", "--input", json.dumps(TRIP), "--json", env=env, cwd=tmp_path
        )
        script = await starter(
            "start", "TripPlanner", "--input", json.dumps(TRIP | {"days": 1}), "--json",
            env=env, cwd=tmp_path,
        )  # fmt: skip

    assert console.code == 0, console.err
    assert json.loads(console.out)["result"] == ITINERARY
    assert script.code == 0, script.err
    assert json.loads(script.out)["result"]["days"] == ["day 1: walk Gdańsk"]


# --- mistakes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (
            ["--input", '{"text": "x", "days": "two"}'],
            "starter: --input does not fit Trip: days: Input should be a valid integer, "
            "unable to parse string as an integer",
        ),
        (
            ["--input", '{"text": "x", "days": 9}'],
            "starter: --input does not fit Trip: days: Input should be less than or equal to 5",
        ),
        (
            ["--input", '{"days": 2, "extra": 1, "text": 3}'],
            "starter: --input does not fit Trip: text: Input should be a valid string",
        ),
        (["--input", '{"text": '], "starter: --input is not JSON: Expecting value (line 1, "),
        (["--input", "@nowhere.json"], "starter: --input: cannot read nowhere.json: No such"),
        (["--input", "@huge.json"], "starter: --input: huge.json is over 10,000,000 bytes"),
        ([], "starter: TripPlanner needs --input: Trip as JSON"),
    ],
)
async def test_bad_input_is_one_line_and_starts_nothing(
    client: Client,
    user_env: dict[str, str],
    src: Path,
    tmp_path: Path,
    args: list[str],
    reason: str,
) -> None:
    env = user_env | {"PYTHONPATH": str(src)}
    # A goal of 10.5 MB: over the starter's input cap.
    (tmp_path / "huge.json").write_text(json.dumps({"text": "x" * 10_500_000, "days": 2}))
    run = await starter("start", "TripPlanner", *args, "--recipes", "trips.recipes", env=env,
                        cwd=tmp_path)  # fmt: skip
    assert run.code == 2
    assert len(run.err_lines) == 1 and run.err_lines[0].startswith(reason), run.err
    assert run.out == ""
    assert await executions(client, env["DURAFACT_TASK_QUEUE"]) == []


async def test_an_unknown_type_is_one_line_naming_the_registered_ones(
    src: Path, tmp_path: Path
) -> None:
    # No TEMPORAL_ADDRESS: had anything been started, it would be an embedded stack.
    env = clean_env(DURAFACT_TEMPORAL_PORT=str(free_port()), PYTHONPATH=str(src))
    runs = await asyncio.gather(
        starter(
            "start",
            "TripPlaner",
            "--input",
            "{}",
            "--recipes",
            "trips.recipes",
            env=env,
            cwd=tmp_path,
        ),  # fmt: skip
        durafact("start", "TripPlanner", "--input", "{}", env=env, cwd=tmp_path),
    )
    for run in runs:
        assert run.code == 2
        assert run.out == ""
    assert runs[0].err_lines == [
        "starter: unknown workflow type 'TripPlaner' (registered: AnswerFlowWorkflow, "
        "ChatWorkflow, PlanExecuteWorkflow, PlanReActWorkflow, ReActWorkflow, ReflectionWorkflow, "
        "ResearchWorkflow, SupervisorWorkflow, TripPlanner; register yours with --recipes MODULE "
        "or DURAFACT_RECIPES)"
    ]
    assert runs[1].err_lines[0].startswith("starter: unknown workflow type 'TripPlanner'")
    assert not (tmp_path / ".durafact").exists()


@pytest.mark.parametrize(
    ("module", "reason"),
    [
        (
            "nowhere.recipes",
            "recipes module 'nowhere.recipes' cannot be imported: ModuleNotFoundError: "
            "No module named 'nowhere' (is it on PYTHONPATH, installed, or under the current "
            "directory?)",
        ),
        (
            "trips.broken",
            "recipes module 'trips.broken' cannot be imported: ModuleNotFoundError: "
            "No module named 'nowhere_to_be_found'",
        ),
        (
            "trips.empty",
            "recipes module 'trips.empty' has no RECIPES (a recipes module lists "
            "RECIPES = [...] and OUTPUT_MODELS = [...])",
        ),
        (
            "trips.not_a_workflow",
            "trips.not_a_workflow: RECIPES lists trips.recipes:Trip, not a workflow class "
            "(a class decorated with @workflow.defn whose @workflow.run method is `run`)",
        ),
        (
            "trips.clash",
            "workflow type 'PlanExecuteWorkflow' is registered twice: "
            "durafact._recipes.plan_execute:PlanExecuteWorkflow (durafact._recipes) and "
            "trips.clash:PlanExecuteWorkflow (trips.clash)",
        ),
    ],
)
async def test_bad_registration_is_one_line_before_anything_starts(
    src: Path, tmp_path: Path, module: str, reason: str
) -> None:
    # Nothing answers at this address: a line about it would mean something connected.
    env = clean_env(TEMPORAL_ADDRESS="127.0.0.1:1", PYTHONPATH=str(src), OPENAI_API_KEY="x")
    runs = await asyncio.gather(
        starter("plan", "x", "--recipes", module, env=env, cwd=tmp_path),
        starter("result", "some-id", env=env | {"DURAFACT_RECIPES": module}, cwd=tmp_path),
        worker_run([str(BIN / "durafact-worker"), "--recipes", module], env, tmp_path),
    )
    for run, who in zip(runs, ("starter", "starter", "worker"), strict=True):
        assert run.code == 2, run.err
        assert run.err_lines == [f"{who}: {reason}"]
        assert run.out == ""


async def test_a_broken_entry_point_names_its_distribution(src: Path, tmp_path: Path) -> None:
    install_entry_point(src, "trips.missing")
    env = clean_env(TEMPORAL_ADDRESS="127.0.0.1:1", PYTHONPATH=str(src), OPENAI_API_KEY="x")
    runs = await asyncio.gather(
        durafact("start", "TripPlanner", "--input", "{}", env=env, cwd=tmp_path),
        worker_run([*DURAFACT_WORKER], env, tmp_path),
    )
    for run, who in zip(runs, ("starter", "worker"), strict=True):
        assert run.code == 2
        assert run.err_lines == [
            f"{who}: entry point 'trips' (durafact.recipes) of trips-dist 0.1: recipes module "
            "'trips.missing' cannot be imported: ModuleNotFoundError: No module named "
            "'trips.missing' (is it on PYTHONPATH, installed, or under the current directory?)"
        ]


async def worker_run(argv: list[str], env: dict[str, str], cwd: Path) -> Run:
    return await run_command(*argv, env=env, cwd=cwd)


# --- the registry itself -----------------------------------------------------------------


def test_modules_come_from_options_and_the_environment_each_once() -> None:
    env = {"DURAFACT_RECIPES": "a.recipes, b.recipes,"}
    assert recipe_modules(["b.recipes,c.recipes", "a.recipes"], env) == [
        "a.recipes",
        "b.recipes",
        "c.recipes",
    ]
    assert recipe_modules([], {}) == []


def test_a_module_listed_twice_registers_once_with_its_output_models(
    src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(src))
    try:
        registry = load_registry(["trips.recipes", "trips.recipes"], entry_points=False)
        assert registry.modules == [
            "durafact._recipes",
            "durafact._activities.calculator",
            "trips.recipes",
        ]
        trip = registry.get("TripPlanner")
        assert trip is not None and trip.origin == "trips.recipes"
        assert [t.__name__ for t in trip.inputs or []] == ["Trip"]
        assert trip.result_type.__name__ == "Itinerary"
        assert "trips.recipes:Cities" in registry.output_models
        assert "durafact._recipes.plan_execute:Plan" in registry.output_models
        with pytest.raises(RegistrationError, match="registered twice"):
            load_registry(["trips.recipes", "trips.clash"], entry_points=False)
    finally:
        for name in [m for m in sys.modules if m == "trips" or m.startswith("trips.")]:
            del sys.modules[name]


# A module of tools only, and two mistakes in listing them.
TOOLS_MODULE = """
from durafact import tool


@tool(destructive=True)
def cancel_trip(trip: str, idempotency_key: str) -> str:
    \"\"\"Cancel a booked trip.\"\"\"
    return f"cancelled {trip} once for {idempotency_key}"


TOOLS = [cancel_trip]
"""
TOOL_MISTAKES = {
    "not_a_tool": ("TOOLS = [print]\n", "trips.not_a_tool: TOOLS lists <built-in function print>"),
    "tool_clash": (
        "from durafact import tool\n\n"
        "@tool\ndef calculator(expression: str) -> str:\n    return expression\n\n"
        "TOOLS = [calculator]\n",
        "tool 'calculator' is registered twice: durafact._activities.calculator:calculator and "
        "trips.tool_clash:calculator (trips.tool_clash)",
    ),
}


async def test_tools_listed_by_a_recipes_module_run_beside_the_built_in_ones(
    src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (src / "trips" / "tools.py").write_text(TOOLS_MODULE)
    for name, (text, _) in TOOL_MISTAKES.items():
        (src / "trips" / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(src))
    try:
        registry = load_registry(["trips.recipes", "trips.tools"], entry_points=False)
        assert sorted(registry.tools) == ["calculator", "cancel_trip"]
        assert registry.get("TripPlanner") is not None
        catalog = ToolCatalog(registry.tools.values())
        [spec] = await catalog.specs(["cancel_trip"])
        assert (spec.description, spec.destructive) == ("Cancel a booked trip.", True)
        request = ToolRequest(
            call=ToolCall(id="c1", name="cancel_trip", arguments={"trip": "Baltic coast"}),
            idempotency_key="wf-1:c1",
        )
        result = await catalog.call(request)
        assert result.content == "cancelled Baltic coast once for wf-1:c1"
        for name, (_, reason) in TOOL_MISTAKES.items():
            with pytest.raises(RegistrationError) as raised:
                load_registry([f"trips.{name}"], entry_points=False)
            assert str(raised.value).startswith(reason)
    finally:
        for name in [m for m in sys.modules if m == "trips" or m.startswith("trips.")]:
            del sys.modules[name]


def test_every_structured_call_of_a_built_in_asks_for_a_registered_model() -> None:
    """A model a built-in recipe asks for but `workflows.OUTPUT_MODELS` lacks would fail
    every run that reaches the call (UnknownOutputType)."""
    registered = builtin_registry().output_models
    asked: dict[str, str] = {}
    for path in sorted((ROOT / "durafact/_recipes").glob("*.py")):
        module = importlib.import_module(f"durafact._recipes.{path.stem}")
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            # ctx.llm.structured(Model, ...) and ctx.llm.request(..., output=Model)
            named = [k.value for k in node.keywords if k.arg == "output"]
            if node.func.attr == "structured" and node.args:
                named.append(node.args[0])
            for name in named:
                # a model class by name (recipe.py passes its own `output` parameter on)
                if isinstance(name, ast.Name) and name.id[:1].isupper():
                    model = getattr(module, name.id)
                    asked[type_path(model)] = f"{path.name}:{node.lineno}"
    assert len(asked) >= 10
    assert {name: where for name, where in asked.items() if name not in registered} == {}


# --- a worker that lacks the recipe --------------------------------------------------------


async def test_start_on_a_worker_without_the_recipe_is_refused_with_the_fix(
    client: Client, user_env: dict[str, str], src: Path, tmp_path: Path
) -> None:
    env = user_env | {"PYTHONPATH": str(src)}
    async with worker_process(client, [*DURAFACT_WORKER], env, cwd=ROOT):
        run = await starter(
            "start", "TripPlanner", "--input", json.dumps(TRIP), "--recipes", "trips.recipes",
            "--id", "trip-unregistered", env=env, cwd=tmp_path,
        )  # fmt: skip
    assert run.code == 1
    assert run.err_lines == [
        "starter: no worker on this task queue has TripPlanner registered: start one with "
        "`durafact-worker --recipes trips.recipes`"
    ]
    description = await client.get_workflow_handle("trip-unregistered").describe()
    assert description.status is not None and description.status.name == "TERMINATED"


async def test_status_of_a_run_its_worker_cannot_run_says_how_to_fix_it(
    client: Client, user_env: dict[str, str], src: Path, tmp_path: Path
) -> None:
    env = user_env | {"PYTHONPATH": str(src), "DURAFACT_RECIPES": "trips.recipes"}
    queue = env["DURAFACT_TASK_QUEUE"]
    async with worker_process(client, [*DURAFACT_WORKER], user_env, cwd=ROOT):
        handle = await client.start_workflow(
            "TripPlanner", TRIP, id=f"t-{uuid.uuid4().hex[:6]}", task_queue=queue
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:  # until its workflow task has failed more than once
            run = await starter("status", handle.id, env=env, cwd=tmp_path)
            if "workflow task failing" in run.out or loop.time() > deadline:
                break
            await asyncio.sleep(0.5)
        await handle.terminate("test done")
    assert "is not registered on this worker" in run.out, run.out
    assert (
        "  fix: no worker on this task queue has TripPlanner registered: start one with "
        "`durafact-worker --recipes trips.recipes`"
    ) in run.out.splitlines()


async def test_the_worker_with_no_endpoint_and_no_embedded_model_says_the_fix_in_one_line(
    tmp_path: Path,
) -> None:
    run = await run_command(*DURAFACT_WORKER, env=clean_env(), cwd=tmp_path)
    assert (run.code, run.err_lines) == (
        2,
        [
            "worker: no model endpoint: set OPENAI_BASE_URL (any OpenAI-compatible server) "
            "or OPENAI_API_KEY, give DurafactPlugin endpoints=, or run `durafact up` for the "
            "local model"
        ],
    )


async def test_the_worker_uses_the_embedded_model_when_no_endpoint_is_configured(
    client: Client, model: ScriptedModel, durafact_home: Path, tmp_path: Path
) -> None:
    # The stack's model, as `up` records it: here this test process (serving the
    # scripted model on the stack's model port) stands in for the local model server.
    durafact_home.mkdir(parents=True, exist_ok=True)
    argv = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().decode().split("\0")[:-1]
    (durafact_home / "model.pid").write_text(json.dumps({"pid": os.getpid(), "argv": argv}))
    port = model.url.removeprefix("http://127.0.0.1:").removesuffix("/v1")
    env = clean_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        DURAFACT_TASK_QUEUE=f"local-{uuid.uuid4().hex[:6]}",
        DURAFACT_MODEL_PORT=port,
    )
    log = await said_until(*DURAFACT_WORKER, text="endpoint default:", env=env, cwd=ROOT)
    assert any(
        f"no model endpoint configured: using the embedded local model at {model.url}" in line
        for line in log
    ), log
    assert any(f"endpoint default: {model.url} (no key)" in line for line in log)
