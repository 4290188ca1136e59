"""What the API takes and returns: the request bodies and the answers' shapes, which
are also its OpenAPI document (`/docs`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from durafact._core.approval import ApprovalQuestion, RememberScope
from durafact._core.budget import Budget
from durafact._core.ledger import Link
from durafact._core.llm import Usage
from durafact._core.steer import SteerNote


class Body(BaseModel):
    """A request body: a field it does not have is refused with its name and a guess
    (`'approve' is not a field of body (did you mean 'approved'?)`), never ignored."""

    model_config = ConfigDict(extra="forbid")


class StartRun(Body):
    type: str = Field(description="A registered workflow type, e.g. SupervisorWorkflow.")
    input: Any = Field(
        default=None, description="The input of its run method, as JSON (checked before start)."
    )
    id: str | None = Field(default=None, description="The workflow id (default: a new one).")
    budget: Budget | None = Field(
        default=None,
        description="Set over the input's own `budget` (the fields given): what the run may "
        "use, as the command line's --budget-tokens, --budget-cost, --budget-ask.",
    )


class RunStarted(BaseModel):
    id: str
    run_id: str
    type: str
    ui_url: str = Field(description="The run in the Temporal Web UI.")


class RunRow(BaseModel):
    id: str
    run_id: str
    type: str
    recipe: str | None = Field(description="DurafactRecipe: the recipe's name.")
    status: str | None = Field(description="DurafactStatus: the recipe's phase.")
    state: str = Field(description="Temporal's status: RUNNING, COMPLETED, FAILED, ...")
    tokens: int | None = Field(
        default=None,
        description="Tokens used: DurafactTokens, as of the run's last phase; in `GET "
        "/api/runs` a running run's up to now (the `usage` query, as `status` shows them).",
    )
    cost: float | None = Field(
        default=None,
        description="Their cost in the worker's currency, from the same place (DurafactCost); "
        "None while unknown (a model without a price) or not recorded, never 0 for unknown.",
    )
    started_at: datetime
    closed_at: datetime | None


class RunPage(BaseModel):
    runs: list[RunRow]
    next_page_token: str | None = Field(description="Pass as page_token for the next page.")


class RunDetail(RunRow):
    summary: str | None = Field(description="What the run was started for.")
    recipe_status: str | None = Field(description="The recipe's own status (the query).")
    result: Any = Field(description="The result, once COMPLETED.")
    answer: str | None = Field(
        default=None,
        description="The result as a person reads it, once COMPLETED: as its recipe shows it "
        "with the texts of its ledger, else its JSON; the text `durafact result` prints and "
        "the AI SDK's and AG-UI's streams end with.",
    )
    failure: str | None = Field(description="Why it ended, when it did not complete.")
    usage: Usage | None = Field(
        description="Tokens the run used and their cost: the `usage` query while it runs, "
        "its result's once completed."
    )
    questions: list[ApprovalQuestion] = Field(description="What waits for a person.")
    correctable: list[str] = Field(description="Facts a rejection may correct (`changes`).")
    troubles: list[str] = Field(description="What holds it: retried calls, a failing task.")
    agents: list[RunRow] = Field(
        default_factory=list,
        description="The step agents of a run whose recipe declares them (a PlanReAct "
        "run's child ReAct runs `{id}/{step}`), first step first, from visibility.",
    )
    takes_notes: bool = Field(
        description="Whether `POST /api/runs/{id}/steer` is for it while it runs: its recipe "
        "takes notes (a ReAct run), or passes them to its current step's agent (a PlanReAct "
        "run). A chat takes a note as a message with `steer: true`."
    )
    ui_url: str


class ArtifactView(BaseModel):
    id: str
    type: str
    version: int
    text: str = Field(description="Its `text` field, else its data as JSON.")
    data: Any
    fork_value: str | None = Field(
        default=None,
        description="What a fork of this closed run may set it to, as it is now: its text, "
        "else its JSON (`POST /api/runs/{id}/fork`); None: a fork cannot edit it.",
    )


class Artifacts(BaseModel):
    id: str
    run_id: str
    type: str
    state: str
    artifacts: list[ArtifactView] = Field(description="In the order they were made.")
    links: list[Link]


class ProvenanceView(BaseModel):
    tree: Any = Field(description="The artifact and, under `children`, what it rests on.")
    rendered: str = Field(description="The same tree as text, as `durafact research` prints it.")


class ForkRun(Body):
    set: dict[str, Any] = Field(
        default_factory=dict,
        description="Artifact id -> its new value: text for an artifact with a text (a step, a "
        "result, a quote, a claim), else an object of the fields to change.",
    )
    drop: list[str] = Field(
        default_factory=list, description="Artifacts to leave out (a quote, a claim)."
    )
    id: str | None = Field(default=None, description="The fork's workflow id (default: a new one).")


class RunForked(RunStarted):
    forked_from: str = Field(description="The run it was forked from.")
    forked_run_id: str = Field(description="That run's run id.")
    rerun_from: str = Field(description="The first stage the fork runs again.")
    kept: list[str] = Field(description="The stages taken from the run it was forked from.")


class CancelRequest(Body):
    reason: str = Field(default="", max_length=1000)


class Note(Body, SteerNote):
    """What `/steer` takes: the note of the `steer` update."""


class Canceled(BaseModel):
    id: str
    run_id: str
    state: str = Field(description="CANCEL_REQUESTED: the run ends once it sees it.")


class RunSteered(BaseModel):
    id: str = Field(
        description="The workflow that took the note: the run, or its current step's agent "
        "(a PlanReAct run's child ReActWorkflow)."
    )
    queued: bool = Field(
        description="True (202): the run accepted the note, which waits for the agent's next "
        "model call; false (200, `wait`): the note is in the conversation."
    )
    turn: int | None = Field(
        description="The model call it goes (went) before: its turn; None while not known."
    )
    message: str | None = Field(
        default=None, description="The note's artifact id, `msg:{run}:{n}`, once it is in."
    )


class Decision(Body):
    """An answer to a question: the fields of the `decide` update's answer, but the
    question, which is in the path."""

    # A JSON true or false, nothing read as one: "false" or 0 is refused, not guessed at.
    approved: StrictBool
    reason: str = Field(default="", max_length=10_000)
    changes: dict[str, str] = Field(
        default_factory=dict,
        description="Corrected facts, with a rejection (as `approve --set FIELD=VALUE`); with "
        "the approval of a budget question, its new limits (`tokens`, `cost`).",
    )
    by: str = Field(default="", max_length=200, description="Who answers (default: `http api`).")
    remember: RememberScope | None = Field(
        default=None,
        description="A tool question: let this answer decide later calls without asking: "
        "`call` (the same tool and arguments), `tool` (any arguments, this run), `chat` (the "
        "tool in this chat, across continue-as-new). Other questions refuse it (409).",
    )


class Waiting(BaseModel):
    """One run that waits for a person, with its questions and what they are about."""

    id: str
    run_id: str
    type: str
    summary: str | None
    started_at: datetime
    questions: list[ApprovalQuestion]
    correctable: list[str]
    error: str | None = Field(description="Why its questions could not be read.")


class Approvals(BaseModel):
    runs: list[Waiting]


class RecipeType(BaseModel):
    """A registered recipe, and what its runs can do, as the recipe declares."""

    type: str
    recipe: str
    input_schema: Any = Field(description="The JSON schema of its input (None: no input).")
    chat: bool = Field(default=False, description="A conversation: `/api/chats` talks to it.")
    takes_notes: bool = Field(
        default=False, description="`POST /api/runs/{id}/steer` is for its runs while they run."
    )
    stoppable: bool = Field(
        default=False, description="The turn it is answering can be stopped (`/stop`)."
    )
    correctable: list[str] = Field(
        default_factory=list, description="Facts a rejection may correct (`changes`)."
    )
    step_agents: bool = Field(
        default=False, description="Each step runs an agent, the run `{id}/{step}`."
    )


class StartChat(Body):
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="ChatInput fields: memory ({kind: rolling_digest | window_summarizer | "
        "window_pruner}), tools, system, stream, ...",
    )
    id: str | None = Field(default=None, description="The chat's id (default: a new one).")


class ChatStarted(BaseModel):
    id: str
    run_id: str


class SendMessage(Body):
    text: str = Field(description="The message.")
    id: str | None = Field(
        default=None, description="Its id: the same id again gets the first reply, no new turn."
    )
    steer: bool = Field(
        default=False,
        description="While a turn is being answered: join it before its next model call; "
        "the reply then says `steered`.",
    )
