"""The per-recipe commands: `plan`, `reflect`, `answer`, `route`, `research`, `react`.

Conveniences over `start TYPE --input ...`: each turns its arguments (declared in
durafact/_cli/arguments.py) into the ready workflow's input, checked here (one line,
exit code 2, before any connection), and starts it on the same path
(`durafact/_cli/launch.py`).
"""

from __future__ import annotations

import argparse
import csv
import ipaddress
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from durafact._activities.skills import SkillError, load_skills
from durafact._cli.arguments import duration
from durafact._cli.launch import Launch
from durafact._cli.output import Failed, one_line, summarize
from durafact._core.answer_flow import AnswerBatchError
from durafact._core.sources import SourceSpec
from durafact._recipes.answer_flow import AnswerFlowWorkflow, load_answer_batch
from durafact._recipes.plan_execute import Goal, PlanExecuteWorkflow
from durafact._recipes.react import ReActInput, ReActWorkflow
from durafact._recipes.reflection import ReflectionInput, ReflectionWorkflow
from durafact._recipes.research import ResearchInput, ResearchWorkflow
from durafact._recipes.supervisor import SupervisorRequest, SupervisorWorkflow
from durafact._runtime.registry import Registry

# Shipped with the package (durafact/data/): the skills matched into prompts, and what
# `research` reads when no source is given, the sample shop.
DATA = Path(__file__).resolve().parent.parent / "data"
SKILLS = DATA / "skills"
SAMPLE_DOCS = DATA / "research" / "docs"
SAMPLE_CSV = DATA / "research" / "prices.csv"


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
