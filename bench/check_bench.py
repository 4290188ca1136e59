"""How long `durafact check` takes for 100 histories, as a CI step runs it: the whole
command, from its start to its last line, the median of `--reps` runs.

    python -m bench.check_bench [--runs 100] [--reps 3]

- files: `durafact check --history` on the committed histories (tests/histories, every
  recipe) repeated to RUNS files: no server.
- server: RUNS PlanExecute runs (3 steps, the scripted model) on a dev server (or the
  configured Temporal), then `durafact check --limit RUNS`: the visibility query, the
  histories fetched, the replays.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench._common import dev_stack
from durafact._recipes import Goal, PlanExecuteWorkflow
from durafact.testing import default_reply

ROOT = Path(__file__).resolve().parents[1]
HISTORIES = sorted((ROOT / "tests" / "histories").rglob("*.json"))
AT_ONCE = 10  # runs started at a time while recording


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    """The wall time of one run of the command, and its last line (it must exit 0)."""
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])}... exited {done.returncode}: {done.stderr}")
    return elapsed, done.stdout.strip().splitlines()[-1]


def command_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DURAFACT_", "OPENAI_"))}
    return env | {"PYTHONPATH": str(ROOT), "TEMPORAL_CONFIG_FILE": os.devnull} | extra


def report(what: str, times: list[float], last: str) -> None:
    print(
        f"{what}: median {statistics.median(times):.2f} s, fastest {min(times):.2f} s "
        f"({len(times)} runs): {last}"
    )


def bench_files(runs: int, reps: int, folder: Path) -> None:
    files = []
    for k in range(runs):
        source = HISTORIES[k % len(HISTORIES)]
        files.append(folder / f"{k:03d}-{source.name}")
        shutil.copy(source, files[-1])
    argv = [sys.executable, "-m", "durafact", "check", "--history", *map(str, files)]
    env = command_env(TEMPORAL_ADDRESS="127.0.0.1:9")  # never reached
    results = [timed(argv, env, folder) for _ in range(reps)]
    report(f"{runs} history files", [t for t, _ in results], results[-1][1])


async def bench_server(runs: int, reps: int) -> None:
    async with dev_stack(default_reply) as stack, stack.worker():
        client, queue = stack.client, stack.settings.task_queue
        gate = asyncio.Semaphore(AT_ONCE)

        async def plan(k: int) -> None:
            async with gate:
                await client.execute_workflow(
                    PlanExecuteWorkflow.run,
                    Goal(text=f"Plan trip {k}"),
                    id=f"check-bench-{uuid.uuid4().hex[:8]}",
                    task_queue=queue,
                )

        started = time.perf_counter()
        await asyncio.gather(*(plan(k) for k in range(runs)))
        print(f"recorded {runs} PlanExecute runs in {time.perf_counter() - started:.1f} s")
        address = client.service_client.config.target_host
        argv = [sys.executable, "-m", "durafact", "check", "--limit", str(runs)]
        env = command_env(TEMPORAL_ADDRESS=address, TEMPORAL_NAMESPACE=client.namespace)
        results = []
        for _ in range(reps):  # in a thread: the worker shares this event loop
            results.append(await asyncio.to_thread(timed, argv, env, ROOT))
        report(f"{runs} runs on the server", [t for t, _ in results], results[-1][1])


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--runs", type=int, default=100)
    options.add_argument("--reps", type=int, default=3)
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        bench_files(args.runs, args.reps, Path(folder))
    asyncio.run(bench_server(args.runs, args.reps))


if __name__ == "__main__":
    main()
