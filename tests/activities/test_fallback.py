"""Model fallback: a run names endpoints in order (`RecipeSettings.endpoints`); a call
that keeps failing retryably on one for `fallback_after` moves to the next inside its
own retries, so it is answered once; a refusal never moves. Three loopback endpoints
with keys of their own (the scripted model server records every request's headers)
show which endpoint each attempt reached and with which key; a port nothing listens on
is an endpoint that is down."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta

import pytest
from pydantic import ValidationError
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from durafact._core.llm import ChatMessage, ModelFallback
from durafact._recipes.recipe import (
    FALLBACK,
    MODEL_DEADLINE_MEMO,
    Progress,
    Recipe,
    RecipeContext,
    RecipeSettings,
)

with workflow.unsafe.imports_passed_through():
    from temporalio.exceptions import ActivityError, ApplicationError

    from durafact._cli.commands import status
    from durafact._runtime.endpoints import Endpoint, EndpointError, configured_endpoints
    from durafact._runtime.settings import Settings
    from durafact._runtime.worker import build_worker
    from durafact.testing import ScriptedModel
    from tests.helpers import free_port, ledger_of

DEFAULT_KEY = "sk-default-key"
PRIMARY_KEY = "sk-primary-key"
BACKUP_KEY = "sk-backup-key"
BACKUP_MODEL = "backup-model"  # DURAFACT_ENDPOINT_BACKUP_MODEL: another provider's name
# Short for the tests; attempts come 1 s, then 2 s apart, so the third attempt (about
# 3 s after the first) is the first one past it.
FALLBACK_AFTER = timedelta(seconds=2)
SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
STARTED = EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED


class Ask(RecipeSettings):
    question: str


@workflow.defn
class AskOnce(Recipe[Ask, str]):
    """One model call on the run's endpoints."""

    recipe_name = "ask-once"

    @workflow.run
    async def run(self, ask: Ask) -> str:
        return await self.execute(ask)

    async def lifecycle(self, ctx: RecipeContext, ask: Ask) -> str:
        return (await ctx.llm.request([ChatMessage(role="user", content=ask.question)])).text


@pytest.fixture
def primary() -> Iterator[ScriptedModel]:
    server = ScriptedModel().start()
    yield server
    server.stop()


def worker_settings(model: ScriptedModel, primary_url: str, backup: ScriptedModel) -> Settings:
    return Settings(
        openai_base_url=model.url,
        openai_api_key=DEFAULT_KEY,
        endpoints={
            "primary": Endpoint(name="primary", base_url=primary_url, api_key=PRIMARY_KEY),
            "backup": Endpoint(
                name="backup", base_url=backup.url, api_key=BACKUP_KEY, model=BACKUP_MODEL
            ),
        },
        model="scripted",
        task_queue=f"test-{uuid.uuid4().hex[:8]}",
    )


@pytest.fixture
async def down_primary(
    client: Client, model: ScriptedModel, backup: ScriptedModel
) -> AsyncIterator[Settings]:
    """A worker whose `primary` is a port nothing listens on (connection refused)."""
    settings = worker_settings(model, f"http://127.0.0.1:{free_port()}/v1", backup)
    async with build_worker(client, settings, workflows=[AskOnce]):
        yield settings


@pytest.fixture
async def live_primary(
    client: Client, model: ScriptedModel, primary: ScriptedModel, backup: ScriptedModel
) -> AsyncIterator[Settings]:
    settings = worker_settings(model, primary.url, backup)
    async with build_worker(client, settings, workflows=[AskOnce]):
        yield settings


async def start(client: Client, settings: Settings, *endpoints: str) -> WorkflowHandle:
    return await client.start_workflow(
        AskOnce.run,
        Ask(question="Which way?", endpoints=list(endpoints), fallback_after=FALLBACK_AFTER),
        id=f"fallback-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
        memo={MODEL_DEADLINE_MEMO: 30},  # a call that never falls back fails, not hangs
    )


def keys(server: ScriptedModel) -> set[str]:
    return {call.headers.get("authorization", "") for call in server.calls}


async def test_a_call_moves_to_the_backup_after_fallback_after_when_the_primary_is_down(
    client: Client,
    down_primary: Settings,
    model: ScriptedModel,
    backup: ScriptedModel,
    capsys: pytest.CaptureFixture[str],
) -> None:
    handle = await start(client, down_primary, "primary", "backup")
    assert await handle.result() == "done: Which way?"

    # Answered once, by the backup, on an attempt after the primary's failed ones.
    [answered] = backup.calls
    assert answered.attempt > 1
    assert keys(backup) == {f"Bearer {BACKUP_KEY}"}
    assert answered.body["model"] == BACKUP_MODEL
    assert model.calls == []  # `default` is not one of the run's endpoints
    # Not before fallback_after: from the call's scheduling to its last attempt's start,
    # both the server's times.
    history = await handle.fetch_history()
    [scheduled] = [e for e in history.events if e.event_type == SCHEDULED]
    [started] = [e for e in history.events if e.event_type == STARTED]
    waited = started.event_time.ToDatetime() - scheduled.event_time.ToDatetime()
    assert waited >= FALLBACK_AFTER
    assert started.activity_task_started_event_attributes.attempt == answered.attempt
    # The primary's failures named it.
    failure = started.activity_task_started_event_attributes.last_failure
    assert failure.message.startswith("model endpoint 'primary' unreachable")

    # The artifact, the progress and `status` say which endpoint and model answered.
    record = (await ledger_of(handle)).get("fallback:llm:ask-once").typed(ModelFallback).data
    assert record == ModelFallback(
        call="llm:ask-once", endpoint="backup", model=BACKUP_MODEL, instead_of="primary"
    )
    progress = await handle.query("progress", 0, result_type=Progress)
    [said] = [event.message for event in progress.events if event.kind == FALLBACK]
    assert said == (
        "llm:ask-once answered by endpoint backup (model backup-model): primary kept failing"
    )
    assert await status(client, down_primary, handle.id) == 0
    assert f"model fallback: {said}\n" in capsys.readouterr().out


async def test_each_endpoint_gets_only_its_own_key(
    client: Client,
    live_primary: Settings,
    model: ScriptedModel,
    primary: ScriptedModel,
    backup: ScriptedModel,
) -> None:
    primary.fail(503, times=100)  # up, but failing: it records what it was sent
    handle = await start(client, live_primary, "primary", "backup")
    assert await handle.result() == "done: Which way?"

    assert primary.calls and keys(primary) == {f"Bearer {PRIMARY_KEY}"}
    assert len(backup.calls) == 1 and keys(backup) == {f"Bearer {BACKUP_KEY}"}
    # Each endpoint is asked for its own model: the primary the worker's.
    assert {c.body["model"] for c in primary.calls} == {"scripted"}
    assert backup.calls[0].body["model"] == BACKUP_MODEL
    assert [c.attempt for c in primary.calls] == list(range(1, len(primary.calls) + 1))
    assert backup.calls[0].attempt == len(primary.calls) + 1
    assert model.calls == []
    for server, others in ((primary, (BACKUP_KEY, DEFAULT_KEY)), (backup, (PRIMARY_KEY,))):
        sent = "".join(f"{call.headers}{call.body}" for call in server.calls)
        assert not any(key in sent for key in others)


async def test_a_refusal_on_the_primary_fails_at_once_without_falling_back(
    client: Client, live_primary: Settings, primary: ScriptedModel, backup: ScriptedModel
) -> None:
    primary.fail(401, times=10)
    handle = await start(client, live_primary, "primary", "backup")
    with pytest.raises(WorkflowFailureError) as raised:
        await handle.result()
    error = raised.value.cause
    assert isinstance(error, ActivityError) and isinstance(error.cause, ApplicationError)
    assert error.cause.type == "AuthenticationFailed" and error.cause.non_retryable
    assert error.cause.message.startswith("model endpoint 'primary' answered 401")
    assert len(primary.calls) == 1
    assert backup.calls == []


async def test_a_fallback_the_worker_lacks_fails_the_first_attempt_before_anything_is_sent(
    client: Client, live_primary: Settings, primary: ScriptedModel
) -> None:
    handle = await start(client, live_primary, "primary", "spare")
    with pytest.raises(WorkflowFailureError) as raised:
        await handle.result()
    cause = raised.value.cause.cause
    assert isinstance(cause, ApplicationError) and cause.type == "UnknownEndpoint"
    assert "no model endpoint 'spare'" in cause.message
    assert primary.calls == []


def test_an_endpoint_names_its_model_beside_its_url() -> None:
    env = {
        "DURAFACT_ENDPOINT_BACKUP": "https://backup.example/v1",
        "DURAFACT_ENDPOINT_BACKUP_KEY": BACKUP_KEY,
        "DURAFACT_ENDPOINT_BACKUP_MODEL": BACKUP_MODEL,
    }
    backup = configured_endpoints(env)["backup"]
    assert (backup.api_key, backup.model) == (BACKUP_KEY, BACKUP_MODEL)
    with pytest.raises(EndpointError, match="^DURAFACT_ENDPOINT_SPARE_MODEL is set but "):
        configured_endpoints({"DURAFACT_ENDPOINT_SPARE_MODEL": "m"})


def test_endpoint_names_are_checked_and_lower_cased_before_a_run_starts() -> None:
    assert Ask(question="q", endpoints=["Primary", "backup"]).endpoints == ["primary", "backup"]
    with pytest.raises(ValidationError, match="not endpoint names: \\['http://x/v1'\\]"):
        Ask(question="q", endpoints=["http://x/v1"])
    with pytest.raises(ValidationError, match="endpoints named twice: backup"):
        Ask(question="q", endpoints=["backup", "primary", "BACKUP"])
    with pytest.raises(ValidationError, match="fallback_after"):
        Ask(question="q", fallback_after=timedelta(0))
