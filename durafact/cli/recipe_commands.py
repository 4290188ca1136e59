"""The per-recipe commands: `plan`, `reflect`, `answer`, `route`, `research`, `react`.

Conveniences over `start TYPE --input ...`: each turns its arguments into the
ready workflow's input, checked here (one line, exit code 2, before any
connection), and starts it on the same path (`durafact/cli/launch.py`).
"""

from __future__ import annotations

import argparse
import csv
import ipaddress
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from activities.skills import SkillError, load_skills
from durafact.answer_flow import AnswerBatchError
from durafact.cli.launch import Launch
from durafact.cli.output import Failed, one_line, summarize
from durafact.runtime.registry import Registry
from durafact.sources import SourceSpec
from durafact.text import shorten
from workflows.answer_flow import AnswerFlowWorkflow, load_answer_batch
from workflows.plan_execute import MAX_STEPS, Goal, PlanExecuteWorkflow
from workflows.react import ReActInput, ReActWorkflow
from workflows.reflection import ReflectionInput, ReflectionWorkflow
from workflows.research import ResearchInput, ResearchWorkflow
from workflows.supervisor import SupervisorRequest, SupervisorWorkflow

RECIPE_COMMANDS = ("plan", "reflect", "answer", "route", "research", "react")
# Shipped with the package (durafact/data/): the skills matched into prompts, and what
# `research` reads when no source is given, the sample shop.
DATA = Path(__file__).resolve().parent.parent / "data"
SKILLS = DATA / "skills"
SAMPLE_DOCS = DATA / "research" / "docs"
SAMPLE_CSV = DATA / "research" / "prices.csv"


def add_recipe_commands(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """The per-recipe subcommands, each with the options every launch shares (`parents`)."""
    plan = commands.add_parser(
        "plan", parents=parents, help="start a PlanExecute workflow and wait for it"
    )
    plan.add_argument("goal", help="what the plan should achieve")
    plan.add_argument(
        "--max-steps",
        type=int,
        default=Goal.model_fields["max_steps"].default,
        help=f"upper bound on plan length, 1-{MAX_STEPS} (default %(default)s)",
    )

    reflect = commands.add_parser(
        "reflect", parents=parents, help="write, critique and rewrite a text on a topic"
    )
    reflect.add_argument("topic", help="what the text should be about")
    reflect.add_argument("--accept-at", type=float, default=0.8, help="score that accepts")
    reflect.add_argument("--max-rounds", type=int, default=2, help="rewrites at most")

    answer = commands.add_parser(
        "answer", parents=parents, help="answer a batch of questions from their sources"
    )
    answer.add_argument("file", help="the batch: a JSON file (format in README)")
    answer.add_argument("--max-repairs", type=int, help="repair rounds (default: the file's, 1)")
    answer.add_argument(
        "--review",
        choices=("off", "optional", "required"),
        help="review policy (default: the file's)",
    )

    route = commands.add_parser(
        "route",
        parents=parents,
        help="route a request to a specialist and ask a person to approve the report",
    )
    route.add_argument("request", help="what the person asks for")
    route.add_argument(
        "--approval-timeout",
        metavar="DURATION",
        help="how long the approval waits: 30s, 15m, 2h, 3d (default: as long as it takes)",
    )
    route.add_argument(
        "--on-timeout",
        choices=("reject", "escalate"),
        help="after the timeout: reject (default), or escalate once and then reject",
    )

    research = commands.add_parser(
        "research",
        parents=parents,
        help="answer a question from documents, a CSV file and web pages, with provenance",
    )
    research.add_argument("question", help="what to find out")
    research.add_argument(
        "--docs", metavar="DIR", help="a directory of .md/.txt files (default: the sample shop's)"
    )
    research.add_argument(
        "--csv", metavar="FILE", help="a CSV file with a header row (default: the sample prices)"
    )
    research.add_argument(
        "--csv-key", metavar="COLUMN", help="the CSV column that names a row (default: the first)"
    )
    research.add_argument(
        "--url",
        action="append",
        default=[],
        metavar="URL",
        help="a web page to consider (repeatable); fetched only if the model chooses it",
    )
    research.add_argument("--search-endpoint", metavar="URL", help="a SearxNG JSON search API")
    research.add_argument(
        "--allow-private",
        action="store_true",
        help="let the web source fetch loopback and private addresses (a local wiki); "
        "a redirect from there still needs --allow-network",
    )
    research.add_argument(
        "--allow-network",
        action="append",
        default=[],
        metavar="CIDR",
        help="a network the web source may fetch from, redirects included (repeatable), "
        "e.g. 10.1.2.0/24: the narrow exception to the public-address rule",
    )
    research.add_argument("--limit", type=int, default=8, help="search results kept (default 8)")
    research.add_argument(
        "--max-docs", type=int, default=4, help="documents the model may read (default 4)"
    )

    react = commands.add_parser(
        "react",
        parents=parents,
        help="answer a question in a tool loop: think, call a tool, read what it said, repeat",
    )
    react.add_argument("question", help="what to find out")
    react.add_argument(
        "--tools",
        action="append",
        metavar="NAME[,NAME...]",
        help="the worker's tools the agent may use (repeatable; default: calculator; "
        "'' for none; SERVER__TOOL for one MCP tool)",
    )
    react.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="NAME",
        help="an MCP server configured on the worker whose every tool it may use (repeatable)",
    )
    react.add_argument(
        "--protocol",
        choices=("text", "native"),
        default="text",
        help="text: Thought/Action/Observation (default); native: the chat API's tool calls",
    )
    react.add_argument(
        "--max-turns", type=int, default=8, metavar="N", help="model calls at most (default 8)"
    )
    react.add_argument(
        "--context",
        choices=("keep_all", "prune_observations", "compact"),
        default="keep_all",
        help="what the model sees of earlier turns: every message (default), old observations "
        "by their first line, or a digest of all but the last 10 turns",
    )


def ready(
    registry: Registry,
    workflow: type,
    arg: BaseModel,
    command: str,
    summary: str,
    details: str,
    asks_approval: bool = False,
) -> Launch:
    """The launch of a ready workflow; `command` is also the default id's prefix."""
    recipe = registry.get(workflow.__name__)
    assert recipe is not None, f"{workflow.__name__} is a built-in: always registered"
    return Launch(recipe, [arg], command, command, summary, details, asks_approval)


def launch_of(args: argparse.Namespace, registry: Registry) -> Launch:
    """The workflow a recipe command starts; bad input fails here, before any connection."""
    if args.command == "plan":
        goal = checked(Goal, {"text": args.goal, "max_steps": args.max_steps}, positional="text")
        return ready(
            registry,
            PlanExecuteWorkflow,
            goal,
            "plan",
            f"plan: {summarize(goal.text)}",
            f"**Goal:** {goal.text}\n\n**Max steps:** {goal.max_steps}",
        )
    if args.command == "reflect":
        request = checked(
            ReflectionInput,
            {"topic": args.topic, "accept_at": args.accept_at, "max_rounds": args.max_rounds},
            positional="topic",
        )
        return ready(
            registry,
            ReflectionWorkflow,
            request,
            "reflect",
            f"reflect: {summarize(request.topic)}",
            f"**Topic:** {request.topic}\n\n**Accept at:** {request.accept_at}, "
            f"**max rounds:** {request.max_rounds}",
        )
    if args.command == "route":
        if args.on_timeout is not None and args.approval_timeout is None:
            raise Failed("--on-timeout needs --approval-timeout", code=2)
        timeout = None
        if args.approval_timeout is not None:
            timeout = duration(args.approval_timeout, "--approval-timeout")
        request = checked(
            SupervisorRequest,
            {
                "request": args.request,
                "approval_timeout": timeout,
                "on_timeout": args.on_timeout or "reject",
            },
            positional="request",
        )
        waits = (
            f"{args.approval_timeout}, then {request.on_timeout}"
            if timeout
            else "as long as it takes"
        )
        return ready(
            registry,
            SupervisorWorkflow,
            request,
            "route",
            f"route: {summarize(request.request)}",
            f"**Request:** {request.request}\n\n**Routes:** {', '.join(request.routes)}, "
            f"**approval waits:** {waits}",
            asks_approval=True,
        )
    if args.command == "research":
        return research_launch(args, registry)
    if args.command == "react":
        return react_launch(args, registry)
    try:
        document = Path(args.file).read_bytes()
    except OSError as exc:
        raise Failed(f"cannot read {args.file}: {exc.strerror}", code=2) from None
    try:
        batch = load_answer_batch(document, max_repairs=args.max_repairs, review_policy=args.review)
    except AnswerBatchError as exc:
        raise Failed(f"{args.file}: {exc}", code=2) from None
    return ready(
        registry,
        AnswerFlowWorkflow,
        batch,
        "answer",
        f"answer: {len(batch.questions)} questions from {Path(args.file).name}",
        f"**Questions:** {len(batch.questions)}\n\n**Max repairs:** {batch.max_repairs}, "
        f"**review:** {batch.review_policy}",
    )


def research_launch(args: argparse.Namespace, registry: Registry) -> Launch:
    """The research workflow: sources from the options (the sample shop without any),
    the shipped skills, all checked here."""
    sources = research_sources(args)
    try:
        skills = load_skills(SKILLS) if SKILLS.is_dir() else []
    except SkillError as exc:
        raise Failed(str(exc)) from None
    request = checked(
        ResearchInput,
        {
            "question": args.question,
            "sources": sources,
            "limit": args.limit,
            "max_docs": args.max_docs,
            "skills": skills,
        },
        positional="question",
    )
    listed = ", ".join(f"{s.source_id} ({s.kind})" for s in request.sources)
    return ready(
        registry,
        ResearchWorkflow,
        request,
        "research",
        f"research: {summarize(request.question)}",
        f"**Question:** {request.question}\n\n**Sources:** {listed}, **limit:** "
        f"{request.limit}, **max docs:** {request.max_docs}",
    )


def react_launch(args: argparse.Namespace, registry: Registry) -> Launch:
    """The tool loop: the question, its tools (the calculator unless told) and budget."""
    values: dict[str, Any] = {
        "question": args.question,
        "mcp_servers": names(args.mcp),
        "protocol": args.protocol,
        "max_turns": args.max_turns,
        "context": {"kind": args.context},
    }
    if args.tools is not None:
        values["tools"] = names(args.tools)
    request = checked(ReActInput, values, positional="question", options={"mcp_servers": "--mcp"})
    tools = ", ".join([*request.tools, *request.mcp_servers]) or "none"
    return ready(
        registry,
        ReActWorkflow,
        request,
        "react",
        f"react: {summarize(request.question)}",
        f"**Question:** {request.question}\n\n**Tools:** {tools}, **protocol:** "
        f"{request.protocol}, **max turns:** {request.max_turns}",
    )


def names(given: list[str]) -> list[str]:
    """Names from repeatable, comma-separated options: `--tools a,b --tools c`."""
    return [name.strip() for option in given for name in option.split(",") if name.strip()]


def research_sources(args: argparse.Namespace) -> list[SourceSpec]:
    """The `SourceSpec`s the options name, paths made absolute for the worker."""
    web = bool(args.url or args.search_endpoint)
    if args.allow_private and not web:
        raise Failed("--allow-private applies to --url and --search-endpoint", code=2)
    if args.allow_network and not web:
        raise Failed("--allow-network applies to --url and --search-endpoint", code=2)
    networks = [network(value) for value in args.allow_network]
    if args.csv_key and not args.csv:
        raise Failed("--csv-key needs --csv", code=2)
    if not (args.docs or args.csv or web):
        return [
            SourceSpec.files(str(SAMPLE_DOCS), source_id="docs"),
            SourceSpec.csv(str(SAMPLE_CSV), key="item", source_id="prices"),
        ]
    sources = []
    if args.docs:
        root = Path(args.docs).expanduser().resolve()
        if not root.is_dir():
            raise Failed(f"--docs: {args.docs} is not a directory", code=2)
        sources.append(SourceSpec.files(str(root), source_id="docs"))
    if args.csv:
        path = Path(args.csv).expanduser().resolve()
        try:
            with path.open(newline="", encoding="utf-8-sig") as handle:
                header = [name.strip() for name in next(csv.reader(handle), [])]
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else exc
            raise Failed(f"--csv: cannot read {args.csv}: {reason}", code=2) from None
        if not header:
            raise Failed(f"--csv: {args.csv} has no header row", code=2)
        key = args.csv_key or header[0]
        if key not in header:
            raise Failed(
                f"--csv-key: {args.csv} has no column {key!r} ({', '.join(header)})", code=2
            )
        sources.append(SourceSpec.csv(str(path), key=key, source_id="prices"))
    if web:
        for url in [*args.url, *filter(None, [args.search_endpoint])]:
            if not url.startswith(("http://", "https://")):
                raise Failed(f"not an http(s) URL: {url}", code=2)
        sources.append(
            SourceSpec.web(
                search_endpoint=args.search_endpoint,
                urls=args.url or None,
                allow_private=args.allow_private or None,
                allowed_networks=networks or None,
            )
        )
    return sources


def network(value: str) -> str:
    """`--allow-network`: one network in CIDR notation (an address alone is its /32 or
    /128), or a one-line reason."""
    try:
        return str(ipaddress.ip_network(value.strip()))
    except ValueError as exc:
        raise Failed(
            f"--allow-network: {value!r} is not a network ({exc}); give one like 10.1.2.0/24",
            code=2,
        ) from None


DURATION = re.compile(r"([1-9][0-9]*)([smhd])")
LONGEST = timedelta(days=36_500)  # a wait of more than 100 years is a typo
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def duration(text: str, option: str) -> timedelta:
    """`30s`, `15m`, `2h`, `3d`: a positive whole number and one unit, nothing else."""
    match = DURATION.fullmatch(text)
    if match is None:
        raise Failed(
            f"{option}: {text!r} is not a duration (a whole number above 0 and s, m, h or d: "
            "30s, 15m, 2h, 3d)",
            code=2,
        )
    shown = shorten(text, 24)
    too_long = Failed(f"{option}: {shown!r} is longer than 100 years (36500d)", code=2)
    if len(match[1]) > 12:  # more than 100 years in any unit; int() refuses 4300 digits
        raise too_long
    try:
        value = timedelta(**{UNITS[match[2]]: int(match[1])})
    except OverflowError:  # more days than timedelta holds
        raise too_long from None
    if value > LONGEST:
        raise too_long
    return value


def checked(
    model: type[BaseModel],
    values: dict[str, Any],
    *,
    positional: str,
    options: dict[str, str] | None = None,
) -> Any:
    """`model` from command-line values, or a one-line reason naming the option.

    `positional` is the field the command's argument fills (named: an input's first
    field may be one of its settings'); `options` names the option of a field whose
    name is not `--field-name`."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else ""
        reason = one_line(str(error.get("ctx", {}).get("error") or error["msg"]))
        if field and field != positional:
            option = (options or {}).get(field) or f"--{field.replace('_', '-')}"
            reason = f"{option}: {reason}"
        raise Failed(reason, code=2) from None
