"""`/api/runs`: start any registered recipe, list runs, read one (status, result,
usage, artifacts, provenance), cancel it, steer its agent, fork a closed one. Each route presents an
operation of the service layer (durafact/_service/), as the command line does: a run
started here goes through the same checks, search attributes, memo and summary as
`durafact start`, but an id in use is refused (409) instead of attached to. What a run
can do (take notes, correct facts, step agents) is what its recipe declares, read
from the registry."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Literal
from urllib.parse import quote

from fastapi import APIRouter, Body, Depends, Query, Request, Response
from pydantic import TypeAdapter

from durafact._api.errors import ApiError
from durafact._api.models import (
    Artifacts,
    ArtifactView,
    Canceled,
    CancelRequest,
    ForkRun,
    Note,
    ProvenanceView,
    RecipeType,
    RunDetail,
    RunForked,
    RunPage,
    RunRow,
    RunStarted,
    RunSteered,
    StartRun,
)
from durafact._api.services import Services, services
from durafact._core.llm import Usage
from durafact._core.steer import NoteQueued, note_problem
from durafact._service import cancel as cancelling
from durafact._service import listing
from durafact._service.forks import fork_run, fork_values
from durafact._service.inputs import (
    MAX_INPUT_DEPTH,
    check_path_id,
    check_sendable,
    depth,
    type_label,
)
from durafact._service.launch import (
    input_kind,
    launch_of_input,
    registered_type,
    start_run,
    with_budget,
)
from durafact._service.ledger import ledger_of, read_ledger
from durafact._service.ledger import provenance as provenance_of
from durafact._service.listing import RunInfo
from durafact._service.runs import (
    AWAITING_APPROVAL,
    describe,
    ending,
    is_running,
    jsonable,
    pending_questions,
    queried_usage,
    recipe_status,
    result_text,
    running,
    state_name,
    step_agents,
)
from durafact._service.steering import steer_agent
from durafact._service.troubles import troubles

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
    return RecipeType(
        type=name,
        recipe=recipe.recipe_name,
        input_schema=schema,
        chat=recipe.chat,
        takes_notes=recipe.takes_notes,
        stoppable=recipe.stoppable,
        correctable=list(recipe.correctable),
        step_agents=recipe.step_agents,
    )


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
    check_sendable(launch.args)
    run = await start_run(
        s.client, s.settings, launch, workflow_id, attach=False, started_by="the HTTP API"
    )
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
    """The recipe runs of the namespace, on every task queue (a worker of your own
    polls its own), from visibility (so a filter on the search attributes
    DurafactStatus and WorkflowType costs no worker): running ones first, then the most
    recently closed; one per chain of runs continued as new, unless `state` asks for
    those. As `durafact list` shows them: tokens and cost (`spent`), the recipe
    (DurafactRecipe)."""
    query = listing.runs_query(
        workflow_type=type,
        status=status,
        state=STATES[state] if state else None,
    )
    page, token = await listing.page_of_runs(s.client, query, page_size, token_bytes(page_token))
    return RunPage(
        runs=[row(run) for run in page],
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


def row(run: RunInfo) -> RunRow:
    return RunRow(
        id=run.workflow_id,
        run_id=run.run_id,
        type=run.workflow_type,
        recipe=run.recipe,
        status=run.status,
        state=run.state,
        tokens=run.tokens,
        cost=run.cost,
        started_at=run.started_at,
        closed_at=run.closed_at,
    )


@one_run.get("/runs/{workflow_id:path}", response_model=RunDetail, summary="One run")
async def run(workflow_id: str, s: Annotated[Services, Depends(services)]) -> RunDetail:
    """Temporal's status and the recipe's, the result and its answer (as `durafact
    result` shows it) or why it ended, usage (the `usage` query while it runs, its
    result's after), what waits for a person, what holds it, and its Web UI link."""
    handle = s.client.get_workflow_handle(workflow_id)
    description = await describe(handle)
    live = is_running(description)
    result_type = s.result_type(description.workflow_type)
    result, failure = (None, None) if live else await ending(s.client, description, result_type)
    status = (await recipe_status(handle, description)).value if live else None
    questions = await pending_questions(handle) if status == AWAITING_APPROVAL else []
    usage = await queried_usage(handle) if live else getattr(result, "usage", None)
    recipe = s.registry.get(description.workflow_type)
    answer = None
    if not live and failure is None:  # the ledger holds the texts the recipe shows with it
        ledger = await ledger_of(handle) if recipe is not None and recipe.shows_result else None
        answer = result_text(recipe, result, ledger)
    agents = await step_agents(s.client, s.registry, description)
    return RunDetail(
        **row(listing.recorded(description)).model_dump(),
        summary=await description.static_summary(),
        recipe_status=status,
        result=jsonable(result),
        answer=answer,
        failure=failure,
        usage=usage if isinstance(usage, Usage) else None,
        questions=questions,
        correctable=s.correctable(description.workflow_type),
        troubles=[t.line for t in await troubles(s.client, description)] if live else [],
        agents=[row(listing.recorded(agent)) for agent in agents],
        takes_notes=recipe is not None and recipe.takes_notes,
        ui_url=s.settings.workflow_url(workflow_id, description.run_id),
    )


@router.get("/runs/{workflow_id:path}/artifacts", response_model=Artifacts, summary="The ledger")
async def artifacts(workflow_id: str, s: Annotated[Services, Depends(services)]) -> Artifacts:
    """Every artifact of the run, running or closed (a closed run's is read by a worker
    replaying it), with its text, and the links between them."""
    description, ledger = await read_ledger(s.client, workflow_id)
    recipe = s.registry.get(description.workflow_type)
    editable = fork_values(recipe, description, ledger)
    return Artifacts(
        id=workflow_id,
        run_id=description.run_id,
        type=description.workflow_type,
        state=state_name(description),
        artifacts=[
            ArtifactView(
                id=a.id,
                type=a.type,
                version=a.version,
                text=a.text(),
                data=a.data,
                fork_value=editable.get(a.id),
            )
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
    tree = await provenance_of(s.client, workflow_id, artifact)
    return ProvenanceView(tree=tree.model_dump(mode="json"), rendered=tree.render())


@router.post(
    "/runs/{workflow_id:path}/fork",
    status_code=201,
    response_model=RunForked,
    summary="Fork a closed run from edited artifacts",
    responses={
        400: {"description": "an artifact a fork cannot change, or a value that does not fit"},
        404: {"description": "no such run"},
        409: {"description": "the run still runs, its recipe does not fork, or the id is in use"},
    },
)
async def fork(
    workflow_id: str, body: ForkRun, response: Response, s: Annotated[Services, Depends(services)]
) -> RunForked:
    """`durafact fork`: a new run of the same recipe and input that keeps every artifact
    made upstream of the edits (no model call) and reruns only what depends on them; its
    ledger links each edited artifact `forked_from` the artifact `fork`, which names this
    run. Which artifacts a fork may change: `fork_value` in the run's artifacts."""
    forked = await fork_run(
        s.client,
        s.settings,
        s.registry,
        workflow_id,
        body.set,
        body.drop,
        new_id=body.id,
        started_by="the HTTP API",
    )
    new_id, run = forked.workflow_id, forked.started
    response.headers["Location"] = f"/api/runs/{quote(new_id, safe='')}"
    return RunForked(
        id=new_id,
        run_id=run.run_id,
        type=run.description.workflow_type,
        ui_url=s.settings.workflow_url(new_id, run.run_id),
        forked_from=workflow_id,
        forked_run_id=forked.fork.run_id,
        rerun_from=forked.fork.rerun_from,
        kept=forked.fork.kept,
    )


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
    description = await cancelling.cancel(s.client, workflow_id, body.reason if body else "")
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
    note: Note,
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
    recipe = s.registry.get(description.workflow_type)
    if recipe is not None and recipe.chat:
        raise ApiError(
            409,
            "Conflict",
            f"workflow {workflow_id} is a chat: it takes a note as a message sent with steer: "
            f"true (POST /api/chats/{workflow_id}/messages)",
        )
    agent, steered = await steer_agent(s.client, s.registry, description, note.text, wait)
    if isinstance(steered, NoteQueued):
        return RunSteered(id=agent, queued=True, turn=steered.turn)
    response.status_code = 200
    return RunSteered(id=agent, queued=False, **steered.model_dump())
