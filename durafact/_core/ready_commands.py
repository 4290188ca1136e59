"""The ready recipes' own commands (`plan`, `reflect`, `answer`, `route`, `research`,
`react`): declared here, in the core, and pointed to by the ready workflows
(`PlanExecuteWorkflow.command = PLAN`), so that the command line reads them without
importing a workflow (durafact/_core/commands.py says why). `READY_COMMANDS` is the
built-in table the arguments are read with; the registry finds each on its workflow.

`answer` and `research` read files (the batch, the CSV header, the shipped sample
shop and skills), which workflow code may not import: their `prepare` is named by
import path, in the service layer (durafact/_service/ready_inputs.py).
"""

from __future__ import annotations

from typing import Any

from durafact._core.commands import Command, Option, duration, duration_text, names
from durafact._core.plan_limits import DEFAULT_STEPS, MAX_STEPS

PLAN = Command(
    "plan",
    "start a PlanExecute workflow and wait for it",
    argument="text",
    metavar="goal",
    argument_help="what the plan should achieve",
    options=(
        Option(
            "--max-steps",
            type=int,
            default=DEFAULT_STEPS,
            help=f"upper bound on plan length, 1-{MAX_STEPS} (default %(default)s)",
        ),
    ),
    details=lambda goal: f"**Goal:** {goal.text}\n\n**Max steps:** {goal.max_steps}",
)

REFLECT = Command(
    "reflect",
    "write, critique and rewrite a text on a topic",
    argument="topic",
    argument_help="what the text should be about",
    options=(
        Option("--accept-at", type=float, default=0.8, help="score that accepts"),
        Option("--max-rounds", type=int, default=2, help="rewrites at most"),
    ),
    details=lambda request: (
        f"**Topic:** {request.topic}\n\n**Accept at:** {request.accept_at}, "
        f"**max rounds:** {request.max_rounds}"
    ),
)

ANSWER = Command(
    "answer",
    "answer a batch of questions from their sources",
    argument="file",
    argument_help="the batch: a JSON file (its format: docs/recipes/answer-flow.md)",
    options=(
        Option("--max-repairs", type=int, help="repair rounds (default: the file's, 1)"),
        Option(
            "--review",
            choices=("off", "optional", "required"),
            help="review policy (default: the file's)",
        ),
    ),
    prepare="durafact._service.ready_inputs:answer_input",
    subject=lambda batch: f"{len(batch.questions)} questions",
    details=lambda batch: (
        f"**Questions:** {len(batch.questions)}\n\n**Max repairs:** {batch.max_repairs}, "
        f"**review:** {batch.review_policy}"
    ),
)


def route_input(values: dict[str, Any]) -> dict[str, Any]:
    """A routed request: the timeout's policy goes with a timeout."""
    if values["on_timeout"] is not None and values["approval_timeout"] is None:
        raise ValueError("--on-timeout needs --approval-timeout")
    return {field: value for field, value in values.items() if value is not None}


def route_details(request: Any) -> str:
    timeout = request.approval_timeout
    waits = f"{duration_text(timeout)}, then {request.on_timeout}" if timeout else None
    return (
        f"**Request:** {request.request}\n\n**Routes:** {', '.join(request.routes)}, "
        f"**approval waits:** {waits or 'as long as it takes'}"
    )


ROUTE = Command(
    "route",
    "route a request to a specialist and ask a person to approve the report",
    argument="request",
    argument_help="what the person asks for",
    options=(
        Option(
            "--approval-timeout",
            type=duration,
            metavar="DURATION",
            help="how long the approval waits: 30s, 15m, 2h, 3d (default: as long as it takes)",
        ),
        Option(
            "--on-timeout",
            choices=("reject", "escalate"),
            help="after the timeout: reject (default), or escalate once and then reject",
        ),
    ),
    prepare=route_input,
    details=route_details,
    asks_approval=True,
)


def research_details(request: Any) -> str:
    listed = ", ".join(f"{s.source_id} ({s.kind})" for s in request.sources)
    return (
        f"**Question:** {request.question}\n\n**Sources:** {listed}, **limit:** "
        f"{request.limit}, **max docs:** {request.max_docs}"
    )


RESEARCH = Command(
    "research",
    "answer a question from documents, a CSV file and web pages, with provenance",
    argument="question",
    argument_help="what to find out",
    options=(
        Option(
            "--docs",
            metavar="DIR",
            help="a directory of .md/.txt files (default: the sample shop's)",
        ),
        Option(
            "--csv",
            metavar="FILE",
            help="a CSV file with a header row (default: the sample prices)",
        ),
        Option(
            "--csv-key",
            metavar="COLUMN",
            help="the CSV column that names a row (default: the first)",
        ),
        Option(
            "--url",
            many=True,
            metavar="URL",
            help="a web page to consider (repeatable); fetched only if the model chooses it",
        ),
        Option("--search-endpoint", metavar="URL", help="a SearxNG JSON search API"),
        Option(
            "--allow-private",
            switch=True,
            help="let the web source fetch loopback and private addresses (a local wiki); "
            "a redirect from there still needs --allow-network",
        ),
        Option(
            "--allow-network",
            many=True,
            metavar="CIDR",
            help="a network the web source may fetch from, redirects included (repeatable), "
            "e.g. 10.1.2.0/24: the narrow exception to the public-address rule",
        ),
        Option("--limit", type=int, default=8, help="search results kept (default 8)"),
        Option("--max-docs", type=int, default=4, help="documents the model may read (default 4)"),
    ),
    prepare="durafact._service.ready_inputs:research_input",
    details=research_details,
)


def react_input(values: dict[str, Any]) -> dict[str, Any]:
    """The tool loop's input: its tools the calculator unless told ('' for none)."""
    data = {
        "question": values["question"],
        "mcp_servers": names(values["mcp_servers"] or []),
        "protocol": values["protocol"],
        "max_turns": values["max_turns"],
        "context": {"kind": values["context"]},
    }
    if values["tools"] is not None:
        data["tools"] = names(values["tools"])
    return data


def react_details(request: Any) -> str:
    tools = ", ".join([*request.tools, *request.mcp_servers]) or "none"
    return (
        f"**Question:** {request.question}\n\n**Tools:** {tools}, **protocol:** "
        f"{request.protocol}, **max turns:** {request.max_turns}"
    )


REACT = Command(
    "react",
    "answer a question in a tool loop: think, call a tool, read what it said, repeat",
    argument="question",
    argument_help="what to find out",
    options=(
        Option(
            "--tools",
            many=True,
            metavar="NAME[,NAME...]",
            help="the worker's tools the agent may use (repeatable; default: calculator; "
            "'' for none; SERVER__TOOL for one MCP tool)",
        ),
        Option(
            "--mcp",
            field="mcp_servers",
            many=True,
            metavar="NAME",
            help="an MCP server configured on the worker whose every tool it may use (repeatable)",
        ),
        Option(
            "--protocol",
            choices=("text", "native"),
            default="text",
            help="text: Thought/Action/Observation (default); native: the chat API's tool calls",
        ),
        Option(
            "--max-turns", type=int, default=8, metavar="N", help="model calls at most (default 8)"
        ),
        Option(
            "--context",
            choices=("keep_all", "prune_observations", "compact"),
            default="keep_all",
            help="what the model sees of earlier turns: every message (default), old "
            "observations by their first line, or a digest of all but the last 10 turns",
        ),
    ),
    prepare=react_input,
    details=react_details,
)

READY_COMMANDS = (PLAN, REFLECT, ANSWER, ROUTE, RESEARCH, REACT)
