"""durafact inside a user's own project, as README shows it: the recipe of "Write your
own recipe", the worker and client of "Use durafact in your own worker", and the test of
"Test your recipe", each copied from README into a project in a temporary directory.

That project's root also holds its own `cli.py`, `worker.py`, `starter.py` and
`local_model.py`, the names durafact used to install as top-level modules; each writes a
marker when imported, and durafact must import none of them. The wheel test checks
what `pip install` puts into site-packages: `durafact`, `workflows`, `activities`."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from temporalio.client import Client

from durafact.testing import Call, ScriptedModel
from tests.helpers import ROOT, clean_env, run_command, spawn_command

USER_MODULES = ("cli", "worker", "starter", "local_model")


def readme_block(heading: str) -> str:
    """The one python block of README's section `heading`."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, f"README's {heading!r} shows one python example"
    return blocks[0]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "my_app"
    (root / "trips").mkdir(parents=True)
    (root / "trips" / "__init__.py").write_text("")
    (root / "trips" / "recipes.py").write_text(readme_block("Write your own recipe"))
    (root / "app.py").write_text(readme_block("Use durafact in your own worker"))
    (root / "tests").mkdir()
    (root / "tests" / "test_trips.py").write_text(readme_block("Test your recipe"))
    for name in USER_MODULES:
        (root / f"{name}.py").write_text(
            "from pathlib import Path\n"
            f"with open(Path(__file__).with_name('imported.log'), 'a') as log:\n"
            f"    log.write('{name}\\n')\n"
            f"print('USER MODULE {name} IMPORTED')\n"
        )
    return root


def sdk_exit_abort(code: int, err: str) -> bool:
    """The client process aborted after its work was done, while the interpreter shut
    down: temporalio's Rust threads call into Python during finalization
    (temporalio/sdk-python#300), which durafact's own commands avoid with `os._exit`.
    A plain script like README's meets it now and then, after all its output."""
    return code == -6 and "PyGILState_Release" in err and "finalizing" in err


def planner(call: Call) -> str | dict:
    if call.schema_name == "Cities":
        return {"cities": ["Gdańsk", "Toruń"]}
    if call.schema_name == "Plan":
        return {"steps": ["Pick dates", "Book a hotel"]}
    return f"done: {call.last_user.splitlines()[-1]}"


async def test_a_user_worker_and_client_run_a_user_recipe_and_a_ready_workflow(
    client: Client, model: ScriptedModel, project: Path
) -> None:
    model.reply(planner)
    env = clean_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        OPENAI_BASE_URL=model.url,
        OPENAI_API_KEY="test",
        DURAFACT_MODEL="scripted",
        DURAFACT_PAYLOADS=f"file:{project / 'payloads'}",
    )
    worker = await spawn_command(sys.executable, "app.py", "worker", env=env, cwd=project)
    try:
        run = await run_command(sys.executable, "app.py", env=env, cwd=project, timeout=120)
    finally:
        worker.terminate()
        out, err = await asyncio.wait_for(worker.communicate(), 30)
    assert run.code == 0 or sdk_exit_abort(run.code, run.err), run.err + err.decode()
    days, answer = run.out.splitlines()
    assert days == "['done: Plan a day in Gdańsk.', 'done: Plan a day in Toruń.']"
    assert answer.startswith("done:")
    assert {c.activity_id.split(":")[1] for c in model.calls} == {"plan", "step", "final"}
    assert not (project / "imported.log").exists()
    assert "USER MODULE" not in run.out + out.decode() + err.decode()


async def test_the_readme_test_of_a_user_recipe_passes_under_pytest(project: Path) -> None:
    run = await run_command(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/test_trips.py",
        env=clean_env(PYTHONPATH=str(project)),
        cwd=project,
        timeout=120,
    )
    assert run.code == 0, run.out + run.err
    assert "1 passed" in run.out
    assert not (project / "imported.log").exists()


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


def test_the_wheel_installs_durafact_workflows_and_activities_only(tmp_path: Path) -> None:
    source = tmp_path / "source"  # a copy: the build leaves build/ and *.egg-info behind
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("durafact", "workflows", "activities"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path)],
        cwd=source,
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("durafact-*.whl"))
    assert top_level_names(wheel) == {"durafact", "workflows", "activities"}

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    before = {p.name for p in site.iterdir()}
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps"]
    subprocess.run([*pip, str(wheel)], check=True, capture_output=True)
    added = {p.name for p in site.iterdir()} - before
    assert {name for name in added if not name.endswith(".dist-info")} == {
        "durafact",
        "workflows",
        "activities",
    }
    assert (venv / "bin" / "durafact").exists() and (venv / "bin" / "durafact-worker").exists()
