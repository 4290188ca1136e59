"""How long the command line takes before it does anything, and what it imports for it.

    python -m bench.cli_startup [--runs 10] [--checkout DIR ...]

Runs `python CHECKOUT/starter.py` RUNS times per command, as a person (or a test) does,
and prints the median and the fastest wall time of each; then, from one more run under
`-X importtime`, how long each command spent importing in all and which of the heavy
packages it imported (`-X importtime` slows importing itself: compare its figures with
each other, not with the wall times). With two checkouts (this one and an older commit
extracted with `git archive`, say) their runs alternate, so both meet the same load on a
shared machine: the before and the after.

- `--help`: reads the arguments and prints the usage.
- `status ID`: connects, to a Temporal address where nothing listens, and fails with
  "cannot reach Temporal" (so no server and no network time is counted).
- `plan GOAL`: validates the goal against the registered recipes, then fails the same
  way: everything a typical `plan` does before its first message to the server.
- `plan GOAL --max-steps 0`: bad input, refused before any connection.

Each command runs twice over: with a bytecode cache (written to a temporary directory
by a first run, as an installed package has one), and without one
(PYTHONDONTWRITEBYTECODE=1, as on machines that set it: every project module is
compiled again on every run).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
COMMANDS = {
    "--help": ("--help",),
    "status ID": ("status", "bench-no-such-run"),
    "plan GOAL": ("plan", "Plan a weekend trip to Kraków"),
    "plan GOAL --max-steps 0": ("plan", "Plan a weekend trip to Kraków", "--max-steps", "0"),
}
# The packages worth naming when a command imports them: the model client, MCP, the
# Temporal client, the activities and the workflows.
HEAVY = ("openai", "mcp", "temporalio.client", "activities", "workflows")


def closed_port() -> int:
    """A loopback port where nothing listens (bound and released here)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(checkout: Path, home: Path, cache: Path | None) -> dict[str, str]:
    """This process's environment without a user's Temporal, model or durafact settings,
    pointed at a Temporal address where nothing listens; with or without a bytecode
    cache."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "OPENAI_", "DURAFACT_", "PYTHON"))
    }
    env |= {
        "PYTHONPATH": str(checkout),
        "DURAFACT_HOME": str(home),
        "TEMPORAL_CONFIG_FILE": os.devnull,
        "TEMPORAL_ADDRESS": f"127.0.0.1:{closed_port()}",
    }
    if cache is None:
        return env | {"PYTHONDONTWRITEBYTECODE": "1"}
    return env | {"PYTHONPYCACHEPREFIX": str(cache)}


def run(checkout: Path, env: dict[str, str], args: tuple[str, ...], *flags: str) -> str:
    """One run of the starter; its stderr. A command that crashed stops the bench."""
    done = subprocess.run(
        [sys.executable, *flags, str(checkout / "starter.py"), *args],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode not in (0, 1, 2) or "Traceback" in done.stderr:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stderr


def seconds(checkout: Path, env: dict[str, str], args: tuple[str, ...]) -> float:
    """The wall time of one run."""
    started = time.perf_counter()
    run(checkout, env, args)
    return time.perf_counter() - started


def imports(checkout: Path, env: dict[str, str], args: tuple[str, ...]) -> str:
    """How long one run of the command spent importing, all told, and which of the HEAVY
    packages it imported, with the milliseconds each took (`-X importtime`: the
    cumulative time of each first import; the total sums the top-level ones)."""
    total, found = 0, {}
    for line in run(checkout, env, args, "-X", "importtime").splitlines():
        if not line.startswith("import time:"):
            continue
        _, cumulative, shown = line[len("import time:") :].split("|")
        name = shown.strip()
        if not cumulative.strip().isdigit():  # the header
            continue
        if shown.startswith(" ") and not shown.startswith("  "):  # imported at the top level
            total += int(cumulative)
        if name in HEAVY:
            found[name] = int(cumulative) // 1000
    heavy = ", ".join(f"{name} {ms}" for name, ms in found.items()) or "none of them"
    return f"{total // 1000:>5} ms; {heavy}"


def commit(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or "(not a git checkout)"


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--runs", type=int, default=10, help="runs of each command")
    options.add_argument(
        "--checkout",
        type=Path,
        action="append",
        help="a checkout to measure (repeatable; default: this one)",
    )
    given = options.parse_args()
    checkouts = [c.resolve() for c in given.checkout or [HERE]]
    for number, checkout in enumerate(checkouts, start=1):
        print(f"[{number}] {checkout} at {commit(checkout)}")
    print(f"{given.runs} runs of each command; median (fastest) wall seconds")
    columns = "".join(f"{f'[{n}]':>14}" for n in range(1, len(checkouts) + 1))
    with tempfile.TemporaryDirectory() as temp:
        home = Path(temp, "home")
        caches = [Path(temp, f"pycache-{n}") for n in range(len(checkouts))]
        for label, cached in (("with a bytecode cache", True), ("without one", False)):
            print(f"\n{label:<30}{columns}")
            for name, args in COMMANDS.items():
                envs = [
                    environment(c, home, cache if cached else None)
                    for c, cache in zip(checkouts, caches, strict=True)
                ]
                if cached:
                    for checkout, env in zip(checkouts, envs, strict=True):
                        run(checkout, env, args)  # writes the cache
                times: list[list[float]] = [[] for _ in checkouts]
                for _ in range(given.runs):  # the checkouts take turns
                    for checkout, env, measured in zip(checkouts, envs, times, strict=True):
                        measured.append(seconds(checkout, env, args))
                cells = "".join(
                    f"{f'{statistics.median(t):.2f} ({min(t):.2f})':>14}" for t in times
                )
                print(f"  {name:<28}{cells}")
        print("\nimporting, all told, and the heavy packages in it (ms, with a bytecode cache)")
        for number, (checkout, cache) in enumerate(zip(checkouts, caches, strict=True), 1):
            for name, args in COMMANDS.items():
                imported = imports(checkout, environment(checkout, home, cache), args)
                print(f"  [{number}] {name:<26} {imported}")


if __name__ == "__main__":
    main()
