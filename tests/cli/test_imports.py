"""What the command line imports, which is most of the time it takes to start: reading
the arguments needs only the core (so `--help` and a usage mistake answer at once), and
no command loads what only a worker needs (the `openai` client, the `mcp` SDK, the
activities), nor, on a configured server, the embedded stack. Checked by module name,
never by a clock (bench/cli_startup.py times it). The one number the arguments cannot
import from the workflows, `plan`'s step limit, is checked against them here.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from durafact._cli.arguments import RECIPES_ENV, parser, values_of
from durafact._core.plan_limits import MAX_STEPS
from durafact._recipes.plan_execute import Goal
from durafact._runtime.registry import ENV_VAR
from tests.helpers import DURAFACT, ROOT, run_command

# Only a worker needs these: a model client, MCP sessions, the activities that use them.
WORKER_ONLY = (
    "openai",
    "mcp",
    "durafact._activities.llm",
    "durafact._activities.sources",
    "durafact._activities.mcp",
    "durafact._runtime.worker_kit",
)
# Every command needs these once it runs, and reading its arguments needs none of them.
RUNTIME = ("temporalio", "durafact._recipes", "durafact._activities", "durafact._runtime")

READ_ARGUMENTS = """
import sys
from durafact._cli.arguments import RECIPES_ENV, parser, values_of
for argv in (
    ["plan", "Plan a trip", "--max-steps", "4", "--budget-tokens", "900"],
    ["route", "Renovate", "--approval-timeout", "2h", "--fallback-after", "2m"],
    ["chat", "--memory", "prune", "--budget-cost", "0.5"],
    ["list", "--limit", "10"],
    ["approve", "run-1", "--reject", "--set", "budget=5"],
    ["serve", "--port", "8001"],
):
    parser().parse_args(argv)
import durafact._cli.starter
print("\\n".join(sorted(sys.modules)))
"""


def loaded(names: list[str], packages: tuple[str, ...]) -> list[str]:
    """The modules in `names` that are one of `packages` or inside one."""
    return [n for n in names if any(n == p or n.startswith(f"{p}.") for p in packages)]


def imported_by(stderr: str) -> list[str]:
    """The modules a `python -X importtime` run imported, from its stderr."""
    lines = [line for line in stderr.splitlines() if line.startswith("import time:")]
    names = [line.rsplit("|", 1)[1].strip() for line in lines]
    return [name for name in names if name != "imported package"]  # the header


def test_reading_the_arguments_imports_only_the_core() -> None:
    done = subprocess.run(
        [sys.executable, "-c", READ_ARGUMENTS], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    modules = done.stdout.split()
    assert "durafact._cli.arguments" in modules and "durafact._cli.starter" in modules
    assert loaded(modules, RUNTIME + WORKER_ONLY) == []


async def test_commands_load_no_model_client_mcp_or_activities(
    starter_env: dict[str, str], tmp_path: Path
) -> None:
    missing = f"plan-missing-{uuid.uuid4().hex[:6]}"
    status = await run_command(
        sys.executable, "-X", "importtime", *DURAFACT[1:], "status", missing,
        env=starter_env, cwd=tmp_path,
    )  # fmt: skip
    # A launch command gets as far as the registered recipes and their input models.
    plan = await run_command(
        sys.executable, "-X", "importtime", *DURAFACT[1:], "plan", "Plan a trip",
        "--max-steps", "0", env=starter_env, cwd=tmp_path,
    )  # fmt: skip
    assert (status.code, status.err_lines[-1]) == (1, f"starter: no workflow with id {missing!r}")
    assert (plan.code, plan.err_lines[-1]) == (
        2,
        "starter: --max-steps: Input should be greater than or equal to 1",
    )
    for run in (status, plan):
        modules = imported_by(run.err)
        assert "temporalio.client" in modules and "durafact._runtime.plugin" in modules
        assert loaded(modules, WORKER_ONLY) == []
    # On a configured server, nothing of the embedded stack (the `local` extra's).
    assert loaded(imported_by(status.err), ("durafact._local",)) == []


def test_plan_states_the_limits_of_its_goal(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan --max-steps` states the limits `Goal` keeps to (both from the core)."""
    default = Goal.model_fields["max_steps"].default
    args = parser().parse_args(["plan", "Plan a trip"])
    assert values_of(args, args.declared)["max_steps"] == default
    with pytest.raises(SystemExit):
        parser().parse_args(["plan", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert f"upper bound on plan length, 1-{MAX_STEPS} (default {default})" in shown


def test_the_arguments_name_the_registrys_variable_as_it_does() -> None:
    assert RECIPES_ENV == ENV_VAR
