"""What the embedded model does with README's first-hour commands, counted over runs.

    python -m bench.first_hour_bench [--runs 3] [--checkout DIR] [--only plan,chat]

Starts the embedded stack of CHECKOUT (default: this one; another checkout, such as
an older commit in a worktree of its own, is measured the same way) with
`starter.py up` in a state directory of its own on free ports, so it meets no other
stack; runs each command below RUNS times with `--json`, as a user would; prints, per
command, how many runs did the job and what each printed in essence; and stops the
stack with `starter.py down`.

- `plan`: `make demo`'s plan; done when the run completes.
- `research-price`, `research-late`: README's two research questions on the shipped
  sample; done when the answer carries the price (20.50 EUR: 14.00 + 4.50 + 2.00) or
  the late-return rule (one extra rental day).
- `react-text`, `react-native`: `What is 17 times 23?` with the calculator; done when
  the answer says 391.
- `answer`: `examples/questions.json`; counts the 2 questions with a source that end
  `accepted`.
- `chat`: a name, 7 unrelated messages, then "What is my name?" in one chat (the
  memory's default policy folds the name into its digest by then); done when the
  last reply says the name.

The local server samples with a fixed seed (durafact/_local/local_model.py), so
runs of one command see the same prompts and usually print the same thing; the
runs show whether that holds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
PORTS = ("DURAFACT_TEMPORAL_PORT", "DURAFACT_UI_PORT", "DURAFACT_MODEL_PORT", "DURAFACT_API_PORT")
# Set by a user's shell, they would send the commands elsewhere than the stack started here.
FOREIGN = ("TEMPORAL_ADDRESS", "TEMPORAL_PROFILE", "OPENAI_BASE_URL", "OPENAI_API_KEY")
COMMAND_TIMEOUT = 900.0
SHOWN = 110
NAME = "Ingrid"
CHAT = (
    f"Hello, my name is {NAME}.",
    "What is the capital of France?",
    "Tell me a fun fact about cats.",
    "How many legs does a spider have?",
    "What colour is the sky on a clear day?",
    "Name a fruit that is yellow.",
    "What is a good breakfast?",
    "How do I boil an egg?",
    "What is my name?",
)


@dataclass
class Outcome:
    done: bool
    essence: str
    seconds: float


def one_line(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


class Stack:
    """The embedded stack of one checkout, in a state directory of its own."""

    def __init__(self, checkout: Path, home: Path) -> None:
        self.checkout = checkout
        self.env = {k: v for k, v in os.environ.items() if k not in FOREIGN}
        self.env |= {"PYTHONPATH": str(checkout), "DURAFACT_HOME": str(home)}
        self.env |= {name: str(free_port()) for name in PORTS}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(self.checkout / "starter.py"), *args],
            env=self.env,
            cwd=self.checkout,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
        )

    def result(self, *args: str) -> tuple[dict | None, str]:
        """The `--json` document's result, or None and why the command failed."""
        done = self.run(*args, "--json")
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode == 0 and lines:
            return json.loads(lines[-1]), ""
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return None, re.sub(r"^starter: workflow \S+ ", "", why)  # runs' ids differ


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plan(stack: Stack) -> tuple[bool, str]:
    document, error = stack.result("plan", "Plan a weekend trip to Kraków")
    if document is None:
        return False, error
    return True, "completed: " + document["result"]["answer"]["text"]


def research(question: str, expected: str) -> Callable[[Stack], tuple[bool, str]]:
    def measure(stack: Stack) -> tuple[bool, str]:
        document, error = stack.result("research", question)
        if document is None:
            return False, error
        result = document["result"]
        if result["status"] != "answered":
            return False, f"insufficient: {result['reason']}"
        answer = result["answer"]
        return re.search(expected, answer, re.IGNORECASE) is not None, f"answered: {answer}"

    return measure


def react(protocol: str) -> Callable[[Stack], tuple[bool, str]]:
    def measure(stack: Stack) -> tuple[bool, str]:
        question = "What is 17 times 23?"
        args = ("react", question, "--tools", "calculator", "--protocol", protocol)
        document, error = stack.result(*args)
        if document is None:
            return False, error
        result = document["result"]
        calls = len(result["tool_calls"])
        answer = result["answer"]
        essence = f"{result['ending']} after {result['turns']} turns, {calls} calculator calls"
        if answer is not None:
            essence += f": {answer}"
        return answer is not None and "391" in answer, essence

    return measure


def answer(stack: Stack) -> tuple[bool, str]:
    document, error = stack.result("answer", str(stack.checkout / "examples/questions.json"))
    if document is None:
        return False, error
    verdicts = {v["item_id"]: v for v in document["result"]["results"]}
    accepted = sum(verdicts[i]["status"] == "accepted" for i in ("retries", "history"))
    essence = ", ".join(f"{i} {v['status']}" for i, v in verdicts.items())
    return accepted == 2, f"{accepted} of 2 accepted ({essence})"


def chat(stack: Stack) -> tuple[bool, str]:
    chat_id = f"chat-bench-{uuid.uuid4().hex[:8]}"
    reply = ""
    for text in CHAT:
        document, error = stack.result("chat", chat_id, "--send", text)
        if document is None:
            return False, f"message {CHAT.index(text) + 1}: {error}"
        reply = document["text"]
    return NAME.lower() in reply.lower(), f"asked for the name: {reply}"


MEASURES: dict[str, Callable[[Stack], tuple[bool, str]]] = {
    "plan": plan,
    "research-price": research(
        "How much does a city bike with a child seat and a helmet cost per day?", r"20[.,]50"
    ),
    "research-late": research("What happens if I return a bike late?", r"extra (rental )?day"),
    "react-text": react("text"),
    "react-native": react("native"),
    "answer": answer,
    "chat": chat,
}


def measure(stack: Stack, name: str, runs: int) -> list[Outcome]:
    outcomes = []
    for _ in range(runs):
        started = time.monotonic()
        done, essence = MEASURES[name](stack)
        outcomes.append(Outcome(done, one_line(essence), time.monotonic() - started))
    return outcomes


def report(name: str, outcomes: list[Outcome]) -> None:
    done = sum(o.done for o in outcomes)
    median = sorted(o.seconds for o in outcomes)[len(outcomes) // 2]
    print(f"{name}: {done} of {len(outcomes)} done (median {median:.0f} s)", flush=True)
    for essence in dict.fromkeys(o.essence for o in outcomes):
        times = sum(o.essence == essence for o in outcomes)
        print(f"  {times}x {essence}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--checkout", type=Path, default=HERE)
    parser.add_argument("--only", default=",".join(MEASURES), help="comma-separated names")
    args = parser.parse_args()
    names = [name for name in args.only.split(",") if name]
    unknown = sorted(set(names) - set(MEASURES))
    if unknown:
        parser.error(f"unknown measurement(s) {unknown}; known: {', '.join(MEASURES)}")
    with tempfile.TemporaryDirectory(prefix="durafact-first-hour-") as home:
        stack = Stack(args.checkout.resolve(), Path(home))
        up = stack.run("up")
        if up.returncode != 0:
            sys.exit(f"up failed: {up.stderr.strip() or up.stdout.strip()}")
        try:
            commit = subprocess.run(
                ["git", "-C", str(stack.checkout), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            print(f"checkout {stack.checkout} at {commit}, {args.runs} run(s) each", flush=True)
            for name in names:
                report(name, measure(stack, name, args.runs))
        finally:
            stack.run("down")


if __name__ == "__main__":
    main()
