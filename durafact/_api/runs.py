"""`/api/runs`: start any registered recipe, list runs, read one (status, result,
usage, artifacts, provenance), cancel it, steer its agent. Starting goes through the
command line's own path (`durafact/_cli/launch.py`): the same checks, search attributes,
memo and summary, but an id in use is refused (409) instead of attached to."""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Body, Depends, Query, Request, Response
from pydantic import TypeAdapter
from temporalio.client import WorkflowExecution, WorkflowFailureError
from temporalio.exceptions import WorkflowAlreadyStartedError

from durafact._api.errors import ApiError
from durafact._api.models import (
    Artifacts,
    ArtifactView,
    Canceled,
    CancelRequest,
    ProvenanceView,
    RecipeType,
    RunDetail,
    RunPage,
    RunRow,
    RunStarted,
    RunSteered,
    StartRun,
)
from durafact._api.services import Services, jsonable, services
from durafact._cli.artifacts import read_ledger
from durafact._cli.budget_options import with_budget
from durafact._cli.commands import (
    CORRECTABLE,
    describe,
    pending_questions,
    queried_usage,
    running,
)
from durafact._cli.follow import QUERY_TIMEOUT
from durafact._cli.launch import (
    MAX_INPUT_DEPTH,
    check_path_id,
    check_sendable,
    depth,
    input_kind,
    launch_of_input,
    registered_type,
    start_run,
    type_label,
)
from durafact._cli.listing import LAST_OF_CHAIN, spent
from durafact._cli.output import Failed, state_name
from durafact._cli.results import failure_text
from durafact._cli.steering import steer_agent
from durafact._cli.trouble import troubles
from durafact._core.ledger import LedgerError
from durafact._core.llm import Usage
from durafact._core.steer import NoteQueued, SteerNote, note_problem
from durafact._recipes.approvals import AWAITING_APPROVAL
from durafact._recipes.chat import ChatWorkflow
from durafact._recipes.plan_react import PlanReActWorkflow
from durafact._recipes.react import ReAct
from durafact._recipes.recipe import (
    COST_ATTRIBUTE,
    RECIPE_ATTRIBUTE,
    STATUS_ATTRIBUTE,
    TOKENS_ATTRIBUTE,
)

router = APIRouter(tags=["runs"])
# Routes take `{workflow_id:path}`: an id may hold '/' (a PlanReAct step's agent is
# `{run}/{step}`). The one route whose path ends in the id would take `/runs/X/events`
# whole, so it is on its own router, which app.py adds after every other.
one_run = APIRouter(tags=["runs"])

# Visibility's names for Temporal's states, by the names the API shows.
STATES = {
    "RUNNING": "Running",
    "COMPLETED": "Completed",
    "FAILED": "Failed",
    "CANCELED": "Canceled",
    "TERMINATED": "Terminated",
    "CONTINUED_AS_NEW": "ContinuedAsNew",
    "TIMED_OUT": "TimedOut",
}
# Filters are put into a visibility query: only names, never quotes.
TYPE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
STATUS_PATTERN = r"^[a-z][a-z0-9_]*$"


@router.get("/recipes", response_model=list[RecipeType], summary="The registered recipes")
async def recipes(s: Annotated[Services, Depends(services)]) -> list[RecipeType]:
    """Every workflow type `POST /api/runs` starts, with the JSON schema of its input."""
    return [recipe_view(s, name) for name in s.registry.names()]


def recipe_view(s: Services, name: str) -> RecipeType:
    recipe = s.registry.workflows[name]
    inputs = recipe.inputs or []
    schema = None
    if len(inputs) == 1:
        try:
            schema = TypeAdapter(inputs[0]).json_schema()
        except Exception:  # a type pydantic cannot describe: name it
            schema = {"title": type_label(inputs[0])}
    label = getattr(recipe.cls, "recipe_name", None) or name
    return RecipeType(type=name, recipe=label, input_schema=schema)


@router.post(
    "/runs",
    status_code=201,
    response_model=RunStarted,
    summary="Start any registered recipe",
    responses={404: {"description": "unknown type"}, 409: {"description": "the id is in use"}},
)
async def start(
    body: StartRun, response: Response, s: Annotated[Services, Depends(services)]
) -> RunStarted:
    """Validated against the type's input model before anything starts: 422 with
    pydantic's errors when it does not fit."""
    recipe = registered_type(s.registry, body.type)
    kind = input_kind(recipe, "input" in body.model_fields_set, where="input")
    if depth(body.input) > MAX_INPUT_DEPTH:
        raise ApiError(400, "BadRequest", f"input is nested more than {MAX_INPUT_DEPTH} deep")
    launch = launch_of_input(recipe, kind, body.input, where="input")
    if body.budget is not None:
        launch = with_budget(launch, body.budget.model_dump(exclude_unset=True), "budget")
    workflow_id = launch.workflow_id(body.id)
    check_sendable(launch)
    try:
        run = await start_run(
            s.client, s.settings, launch, workflow_id, attach=False, started_by="the HTTP API"
        )
    except WorkflowAlreadyStartedError:
        taken = await describe(s.client.get_workflow_handle(workflow_id))
        state = state_name(taken)
        raise ApiError(
            409, "Conflict", f"workflow id {workflow_id!r} is taken by a {state} run"
        ) from None
    except Failed as exc:  # the worker on the queue does not have the type
        raise ApiError(503, "NotRegistered", str(exc)) from None
    response.headers["Location"] = f"/api/runs/{quote(workflow_id, safe='')}"
    return RunStarted(
        id=workflow_id,
        run_id=run.run_id,
        type=recipe.name,
        ui_url=s.settings.workflow_url(workflow_id, run.run_id),
    )


@router.get("/runs", response_model=RunPage, summary="Runs, newest first")
async def runs(
    s: Annotated[Services, Depends(services)],
    type: Annotated[str | None, Query(pattern=TYPE_PATTERN, description="workflow type")] = None,
    status: Annotated[str | None, Query(pattern=STATUS_PATTERN, description="phase")] = None,
    state: Annotated[Literal[tuple(STATES)] | None, Query(description="Temporal's")] = None,  # type: ignore[valid-type]
    page_token: str | None = None,
    page_size: Annotated[int, Query(ge=1, le=200)] = 50,
) -> RunPage:
    """The runs on this server's task queue, from visibility (so a filter on the
    search attributes DurafactStatus and WorkflowType costs no worker): running ones
    first, then the most recently closed; one per chain of runs continued as new, unless
    `state` asks for those. Tokens and cost as `durafact list` shows them (`spent`)."""
    where = [s.on_queue]
    if type:
        where.append(f'WorkflowType="{type}"')
    if status:
        where.append(f'{STATUS_ATTRIBUTE.name}="{status}"')
    where.append(f'ExecutionStatus="{STATES[state]}"' if state else LAST_OF_CHAIN)
    listing = s.client.list_workflows(
        " AND ".join(where), page_size=page_size, next_page_token=token_bytes(page_token)
    )
    await listing.fetch_next_page()
    token = listing.next_page_token
    page = listing.current_page or []
    usages = await asyncio.gather(*(spent(s.client, e) for e in page))
    return RunPage(
        runs=[
            row(e).model_copy(update={"tokens": tokens, "cost": cost})
            for e, (tokens, cost) in zip(page, usages, strict=True)
        ],
        next_page_token=base64.urlsafe_b64encode(token).decode() if token else None,
    )


def ids_in_the_path(request: Request) -> None:
    """The dependency of every API route: a run's or a chat's id taken from the path
    cannot have `.` or `..` as a step (400), as one given at start cannot."""
    for name in ("workflow_id", "chat_id"):
        if name in request.path_params:
            check_path_id(request.path_params[name])


def token_bytes(page_token: str | None) -> bytes | None:
    if not page_token:
        return None
    try:
        return base64.b64decode(page_token.encode(), altchars=b"-_", validate=True) or None
    except (binascii.Error, ValueError):
        raise ApiError(400, "BadRequest", "page_token is not one this API gave") from None


def row(execution: WorkflowExecution) -> RunRow:
    attributes = execution.typed_search_attributes
    return RunRow(
        id=execution.id,
        run_id=execution.run_id,
        type=execution.workflow_type,
        recipe=attributes.get(RECIPE_ATTRIBUTE),
        status=attributes.get(STATUS_ATTRIBUTE),
        state=state_name(execution),
        tokens=attributes.get(TOKENS_ATTRIBUTE),
        cost=attributes.get(COST_ATTRIBUTE),
        started_at=execution.start_time,
        closed_at=execution.close_time,
    )


@one_run.get("/runs/{workflow_id:path}", response_model=RunDetail, summary="One run")
async def run(workflow_id: str, s: Annotated[Services, Depends(services)]) -> RunDetail:
    """Temporal's status and the recipe's, the result or why it ended, usage (the `usage`
    query while it runs, its result's after), what waits for a person, what holds it,
    and its Web UI link."""
    handle = s.client.get_workflow_handle(workflow_id)
    description = await describe(handle)
    running = description.status is not None and description.status.name == "RUNNING"
    result, failure = (None, None) if running else await ending(s, description)
    status = await recipe_status(handle, description) if running else None
    questions = []
    if status == AWAITING_APPROVAL:
        questions = await pending_questions(handle)
    usage = await queried_usage(handle) if running else getattr(result, "usage", None)
    return RunDetail(
        **row(description).model_dump(),
        summary=await description.static_summary(),
        recipe_status=status,
        result=jsonable(result),
        failure=failure,
        usage=usage if isinstance(usage, Usage) else None,
        questions=questions,
        correctable=list(CORRECTABLE.get(description.workflow_type, ())),
        troubles=[t.line for t in await troubles(s.client, description)] if running else [],
        agents=await step_agents(s, description),
        takes_notes=takes_notes(s, description.workflow_type),
        ui_url=s.settings.workflow_url(workflow_id, description.run_id),
    )


async def step_agents(s: Services, description: Any) -> list[RunRow]:
    """A PlanReAct run's step agents, first step first: the runs whose id is this run's
    and a step's (`{id}/{step}`) started since this run did."""
    recipe = s.registry.get(description.workflow_type)
    if recipe is None or not issubclass(recipe.cls, PlanReActWorkflow):
        return []
    if '"' in description.id or "\\" in description.id:
        return []  # cannot go into a visibility query as it is; the agents' pages still open
    since = description.start_time.isoformat()
    query = f'WorkflowId STARTS_WITH "{description.id}/" AND StartTime >= "{since}"'
    agents = [row(e) async for e in s.client.list_workflows(query)]
    return sorted(agents, key=lambda agent: agent.started_at)


def takes_notes(s: Services, workflow_type: str) -> bool:
    """Whether the `steer` route is for runs of the type (see RunDetail.takes_notes)."""
    recipe = s.registry.get(workflow_type)
    if recipe is None or issubclass(recipe.cls, ChatWorkflow):
        return False
    return issubclass(recipe.cls, (ReAct, PlanReActWorkflow))


async def ending(s: Services, description: Any) -> tuple[Any, str | None]:
    """A closed run's result (decoded as its type's), or the reason it did not complete."""
    handle = s.client.get_workflow_handle(
        description.id,
        run_id=description.run_id,
        result_type=s.result_type(description.workflow_type),
    )
    try:
        return await handle.result(follow_runs=False), None
    except WorkflowFailureError as exc:
        return None, failure_text(exc)


async def recipe_status(handle: Any, description: Any) -> str | None:
    """The `status` query; the DurafactStatus search attribute when no worker answers."""
    try:
        return await handle.query("status", result_type=str, rpc_timeout=QUERY_TIMEOUT)
    except Exception:
        return description.typed_search_attributes.get(STATUS_ATTRIBUTE)


@router.get("/runs/{workflow_id:path}/artifacts", response_model=Artifacts, summary="The ledger")
async def artifacts(workflow_id: str, s: Annotated[Services, Depends(services)]) -> Artifacts:
    """Every artifact of the run, running or closed (a closed run's is read by a worker
    replaying it), with its text, and the links between them."""
    description, ledger = await read_ledger(s.client, workflow_id)
    return Artifacts(
        id=workflow_id,
        run_id=description.run_id,
        type=description.workflow_type,
        state=state_name(description),
        artifacts=[
            ArtifactView(id=a.id, type=a.type, version=a.version, text=a.text(), data=a.data)
            for a in ledger.all()
        ],
        links=ledger.links,
    )


@router.get(
    "/runs/{workflow_id:path}/provenance/{artifact:path}",
    response_model=ProvenanceView,
    summary="What an artifact rests on",
)
async def provenance(
    workflow_id: str, artifact: str, s: Annotated[Services, Depends(services)]
) -> ProvenanceView:
    """The tree from the artifact down its links: for a research answer, to the claims,
    the evidence, the documents and the `source:...` they were found in."""
    _, ledger = await read_ledger(s.client, workflow_id)
    try:
        tree = ledger.provenance(artifact)
    except LedgerError:
        raise ApiError(404, "NotFound", f"run {workflow_id} has no artifact {artifact!r}") from None
    return ProvenanceView(tree=tree.model_dump(mode="json"), rendered=tree.render())


@router.post(
    "/runs/{workflow_id:path}/cancel",
    status_code=202,
    response_model=Canceled,
    summary="Cancel a run",
)
async def cancel(
    workflow_id: str,
    s: Annotated[Services, Depends(services)],
    body: Annotated[CancelRequest | None, Body()] = None,
) -> Canceled:
    """Temporal's cancellation: the run is asked to stop and ends CANCELED once it sees
    the request. A run that is not running is 409."""
    handle = s.client.get_workflow_handle(workflow_id)
    description = await describe(handle)
    state = state_name(description)
    if state != "RUNNING":
        raise ApiError(409, "Conflict", f"run {workflow_id} is {state}: there is nothing to cancel")
    await handle.cancel(reason=body.reason if body else "")
    return Canceled(id=workflow_id, run_id=description.run_id, state="CANCEL_REQUESTED")


@router.post(
    "/runs/{workflow_id:path}/steer",
    status_code=202,
    response_model=RunSteered,
    summary="A person's note for a running agent",
    responses={
        200: {"description": "with `wait`: the note is in the conversation", "model": RunSteered},
        400: {"description": "the note is empty or too long"},
        409: {
            "description": "the run has ended; it takes no note (not a ReAct run, or a "
            "PlanReAct run between its steps); it is a chat (send a message with `steer: "
            "true`); or (with `wait`) it ended before another model call saw the note"
        },
    },
)
async def steer(
    workflow_id: str,
    note: SteerNote,
    response: Response,
    s: Annotated[Services, Depends(services)],
    wait: Annotated[bool, Query(description="answer once the note is in (200)")] = False,
) -> RunSteered:
    """The update `steer` of a ReAct run, or of the agent a PlanReAct run's current step
    runs: the note is added before the agent's next model call as the user message "Note
    from a person: ...". Answered 202 `queued` once the run accepted it (with the turn it
    goes before, when known), or with `wait` 200 once it is there, with that call's turn;
    the refusals are `durafact steer`'s."""
    if problem := note_problem(note.text):
        raise ApiError(400, "BadRequest", problem)
    description = await running(
        s.client.get_workflow_handle(workflow_id), "there is nothing to steer"
    )
    if description.workflow_type == ChatWorkflow.__name__:
        raise ApiError(
            409,
            "Conflict",
            f"workflow {workflow_id} is a chat: it takes a note as a message sent with steer: "
            f"true (POST /api/chats/{workflow_id}/messages)",
        )
    agent, steered = await steer_agent(s.client, description, note.text, wait)
    if isinstance(steered, NoteQueued):
        return RunSteered(id=agent, queued=True, turn=steered.turn)
    response.status_code = 200
    return RunSteered(id=agent, queued=False, **steered.model_dump())
