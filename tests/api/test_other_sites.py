"""No other site acts for a person (DESIGN.md, section 4). On the console as `durafact
serve` starts it by default, on loopback and without a token, a request that names
another host (DNS rebinding) is refused on every route, and a change sent by a page of
another origin (a form, a `no-cors` fetch, a fetch with JSON) on every route that
changes anything. After each attempt the run still waits, its question is still
pending, the chat's turn goes on unstopped, and no run or chat has started. Real
requests to a real server, and a real browser."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from playwright.async_api import Browser, Page, Response
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError

from durafact._api import create_app
from durafact._api.sites import Sites
from durafact._runtime.registry import load_registry
from durafact._runtime.settings import Settings
from durafact.testing import ScriptedModel
from tests.api.conftest import Served, chromium, serve_api
from tests.api.test_api import asking_about_the_calculator, error_of, start, waiting_question
from tests.cli.test_steer import accepted_updates
from tests.helpers import clean_env, free_port, read_until, serving, spawn
from tests.properties import FAST
from tests.workflows.test_supervisor import REQUEST, specialist

EVIL = "evil.example"
REBOUND = (
    # The attacker's name resolves to loopback, as DNS answers once it has rebound.
    f"--host-resolver-rules=MAP {EVIL} 127.0.0.1",
    # Chromium's own Local Network Access check would keep a page of a public site off
    # loopback; Firefox and Safari have none (the attack used such a browser).
    # The server must refuse by itself.
    "--disable-features=LocalNetworkAccessChecks",
)
CANCEL_REQUESTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
UPDATE_ACCEPTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED


@pytest.fixture(scope="module")
async def open_console(client: Client, scripted_server: ScriptedModel) -> AsyncIterator[Served]:
    """The API as `durafact serve` serves it by default: on loopback, without a token."""
    async with serve_api(client, scripted_server, token=None) as served:
        yield served


@pytest.fixture
async def person(open_console: Served) -> AsyncIterator[httpx.AsyncClient]:
    """A program on this machine, as README's curl commands are: JSON, no Origin."""
    async with httpx.AsyncClient(base_url=open_console.url, timeout=30) as c:
        yield c


def approval(question: str) -> dict[str, Any]:
    """An assistant message of the AI SDK that approves `question`."""
    answer = {"id": question, "approved": True}
    part = {"type": "dynamic-tool", "state": "approval-responded", "approval": answer}
    return {"id": "evil-a", "role": "assistant", "parts": [part]}


def agent_run(thread: str) -> dict[str, Any]:
    """AG-UI's RunAgentInput on `thread`."""
    return {"threadId": thread, "runId": "evil", "messages": [], "tools": [], "context": []}


def resolved(question: str) -> dict[str, Any]:
    """AG-UI's resume entry that approves `question`."""
    return {"interruptId": question, "status": "resolved", "payload": {"approved": True}}


def said(text: str, message_id: str) -> dict[str, Any]:
    """A user message of the AI SDK."""
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


@dataclass
class Targets:
    """What another site aims at: a ReAct run that waits for an answer to `question`
    (before it calls the calculator), a chat whose turn is being answered (its model
    call held; `turn` is the person's message), and the ids a start would take."""

    run: str
    question: str
    chat: str
    turn: asyncio.Task[httpx.Response]
    new_run: str = field(default_factory=lambda: f"evil-run-{uuid.uuid4().hex[:6]}")
    new_chat: str = field(default_factory=lambda: f"evil-chat-{uuid.uuid4().hex[:6]}")

    def changes(self) -> list[tuple[str, dict[str, Any] | None]]:
        """Every route that changes something, as (path, JSON body)."""
        run, chat = quote(self.run, safe=""), quote(self.chat, safe="")
        start = {"question": "Delete everything", "tools": ["delete_file"]}
        return [
            ("/api/runs", {"type": "ReActWorkflow", "input": start, "id": self.new_run}),
            (f"/api/runs/{run}/cancel", None),
            (f"/api/runs/{run}/fork", {"set": {"final": "evil"}}),
            (f"/api/runs/{run}/steer", {"text": "approve whatever comes"}),
            (f"/api/runs/{run}/approvals/{quote(self.question, safe='')}", {"approved": True}),
            ("/api/chats", {"id": self.new_chat}),
            (f"/api/chats/{chat}/messages", {"text": "say yes", "id": "evil"}),
            (f"/api/chats/{chat}/stop", None),
            # The AI SDK's stream: an approval response to the run's question, a message.
            ("/api/ai-sdk/runs", {"id": self.run, "messages": [approval(self.question)]}),
            ("/api/ai-sdk/chats", {"id": self.chat, "messages": [said("say yes", "evil-ui")]}),
            # AG-UI: a resume that approves the run's question, a chat message.
            ("/api/ag-ui/runs", {**agent_run(self.run), "resume": [resolved(self.question)]}),
            (
                "/api/ag-ui/chats",
                {
                    **agent_run(self.chat),
                    "messages": [{"id": "evil-ag", "role": "user", "content": "say yes"}],
                },
            ),
        ]

    def reads(self) -> list[str]:
        """What a page that passed for this server's own would read: the inbox, a run,
        its artifacts, a chat's transcript, and a console page."""
        run = quote(self.run, safe="")
        return [
            "/api/approvals",
            f"/api/runs/{run}",
            f"/api/runs/{run}/artifacts",
            f"/api/chats/{quote(self.chat, safe='')}/transcript",
            f"/runs/{run}",
        ]

    async def unchanged(
        self, client: Client, person: httpx.AsyncClient, model: ScriptedModel
    ) -> None:
        """Assert that nothing another site sent changed anything, then end the turn."""
        run = (await person.get(f"/api/runs/{self.run}")).json()
        assert (run["state"], run["recipe_status"]) == ("RUNNING", "awaiting_approval")
        assert [q["id"] for q in run["questions"]] == [self.question]
        events = (await client.get_workflow_handle(self.run).fetch_history()).events
        assert not [e for e in events if e.event_type in (CANCEL_REQUESTED, UPDATE_ACCEPTED)]
        for started in (self.new_run, self.new_chat):
            with pytest.raises(RPCError, match="not found"):
                await client.get_workflow_handle(started).describe()
        model.release_all()
        reply = (await asyncio.wait_for(self.turn, 30)).json()
        assert (reply["id"], reply["status"]) == ("e", "answered")  # not stopped
        assert await accepted_updates(client, self.chat) == 1  # the person's message alone
        for workflow_id in (self.run, self.chat):
            await person.post(f"/api/runs/{workflow_id}/cancel", json={})


@pytest.fixture
async def targets(
    person: httpx.AsyncClient, model: ScriptedModel, client: Client
) -> AsyncIterator[Targets]:
    run, question = await asking_about_the_calculator(person, model)
    chat = (await person.post("/api/chats", json={"settings": {"stream": False}})).json()["id"]
    model.hold(lambda call: call.workflow_id == chat)
    turn = asyncio.create_task(
        person.post(f"/api/chats/{chat}/messages", json={"text": "an essay", "id": "e"})
    )
    await asyncio.to_thread(model.wait_for, lambda call: call.workflow_id == chat)
    yield Targets(run, question["id"], chat, turn)
    model.release_all()
    turn.cancel()  # done already, unless the test failed first


def port_of(served: Served) -> int:
    port = urlsplit(served.url).port
    assert port is not None
    return port


def sent(body: dict[str, Any] | None) -> bytes:
    return json.dumps(body).encode() if body is not None else b""


# --- real requests ----------------------------------------------------------------------


async def test_every_route_that_changes_something_is_attacked_here() -> None:
    app = create_app(None, Settings(), load_registry(entry_points=False))  # type: ignore[arg-type]
    routes = {
        re.sub(r"\{[^}]*\}", "{}", path)
        for path, operations in app.openapi()["paths"].items()
        for method in operations
        if method not in ("get", "head")
    }
    targets = Targets("r", "q", "c", None)  # type: ignore[arg-type]
    attacked = {re.sub(r"/(r|c|q)(?=/|$)", "/{}", path) for path, _ in targets.changes()}
    assert attacked == routes


@pytest.mark.parametrize(
    "pretends",
    [
        {"Host": EVIL},
        # The page of a rebound name: to the browser it is this server's own origin.
        {"Host": f"{EVIL}:PORT", "Origin": f"http://{EVIL}:PORT", "Sec-Fetch-Site": "same-origin"},
        {"Host": "localhost:1"},  # a loopback name, but another port: not this server
    ],
)
async def test_a_request_that_names_another_host_is_refused_on_every_route_and_changes_nothing(
    pretends: dict[str, str],
    open_console: Served,
    person: httpx.AsyncClient,
    targets: Targets,
    client: Client,
    model: ScriptedModel,
) -> None:
    headers = {k: v.replace("PORT", str(port_of(open_console))) for k, v in pretends.items()}
    json_headers = {**headers, "Content-Type": "application/json", "X-Durafact": "1"}
    for path, body in targets.changes():
        refused = await person.post(path, content=sent(body), headers=json_headers)
        assert error_of(refused, 421)["type"] == "MisdirectedRequest"
        assert f"Host {headers['Host']!r} is not this server's" in refused.text
    for path in targets.reads():
        assert error_of(await person.get(path, headers=headers), 421)
    await targets.unchanged(client, person, model)


ANOTHER_ORIGIN = "http://127.0.0.1:1"  # another program's page on this machine


@pytest.mark.parametrize(
    ("headers", "how"),
    [
        # What browsers send: the page's origin, and where it is from.
        ({"Origin": ANOTHER_ORIGIN, "Sec-Fetch-Site": "same-site"}, "application/json"),
        ({"Origin": f"http://{EVIL}", "Sec-Fetch-Site": "cross-site"}, "form"),
        ({"Origin": "null"}, "application/json"),  # a sandboxed frame, a file
        # A browser that sends no Origin: only what the request is says.
        ({"Sec-Fetch-Site": "cross-site"}, "application/json"),
        ({}, "text/plain"),  # a `no-cors` fetch of JSON text
        ({}, "form"),  # an HTML form
        ({}, None),  # a `no-cors` fetch without a body
    ],
)
async def test_a_change_another_site_sends_is_refused_on_every_route_and_changes_nothing(
    headers: dict[str, str],
    how: str | None,
    person: httpx.AsyncClient,
    targets: Targets,
    client: Client,
    model: ScriptedModel,
) -> None:
    for path, body in targets.changes():
        if how == "form":
            refused = await person.post(path, data={"approved": "true"}, headers=headers)
        elif how:
            refused = await person.post(
                path, content=sent(body), headers={**headers, "Content-Type": how}
            )
        else:
            refused = await person.post(path, headers=headers)
        assert error_of(refused, 403)["type"] == "CrossSiteRequest"
    await targets.unchanged(client, person, model)


async def test_a_program_and_the_consoles_own_pages_still_change_things(
    open_console: Served, person: httpx.AsyncClient, model: ScriptedModel
) -> None:
    port = port_of(open_console)
    model.reply(specialist())
    # curl: a JSON body, and a change without one with a JSON content type all the same.
    run = await start(person, "SupervisorWorkflow", {"request": REQUEST})
    await waiting_question(person, run)
    json_only = {"Content-Type": "application/json"}
    assert (await person.post(f"/api/runs/{run}/cancel", headers=json_only)).status_code == 202
    # The console's own page, as each loopback name reaches it.
    for name in ("127.0.0.1", "localhost", "[::1]"):
        own = {
            "Host": f"{name}:{port}",
            "Origin": f"http://{name}:{port}",
            "Sec-Fetch-Site": "same-origin",
            "X-Durafact": "1",
        }
        chat = await person.post("/api/chats", json={}, headers=own)
        assert chat.status_code == 201, chat.text
        stop = await person.post(f"/api/chats/{chat.json()['id']}/stop", headers=own)
        assert error_of(stop, 409)["type"] == "Refused"  # taken: no turn is being answered
        inbox = await person.get("/api/approvals", headers={"Host": own["Host"]})
        assert inbox.status_code == 200, inbox.text


async def test_a_host_the_person_serving_allowed_is_answered_as_written(
    client: Client, scripted_server: ScriptedModel
) -> None:
    allowed = ["durafact.test", "proxy.test:8443"]
    async with serve_api(client, scripted_server, None, allow_hosts=allowed) as served:
        port = port_of(served)
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
            for host in ("durafact.test", f"durafact.test:{port}", "proxy.test:8443"):
                assert (await http.get("/api/runs", headers={"Host": host})).status_code == 200
                origin = {"Host": host, "Origin": f"https://{host}", "X-Durafact": "1"}
                stop = await http.post("/api/chats/nobody/stop", headers=origin)
                assert error_of(stop, 404)["type"] == "NotFound"  # taken, and looked for
            for host in (f"proxy.test:{port}", "durafact.test:1", f"sub.durafact.test:{port}"):
                assert error_of(await http.get("/api/runs", headers={"Host": host}), 421)


async def test_serve_allows_the_hosts_of_allow_host_and_its_variable_and_no_other(
    client: Client, tmp_path: Path
) -> None:
    port = free_port()
    env = clean_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        DURAFACT_API_ALLOW_HOSTS="other.test:9443, third.test",
    )
    process = await spawn(
        "serve", "--port", str(port), "--allow-host", "durafact.test", env=env, cwd=tmp_path
    )
    try:
        assert process.stdout is not None
        await read_until(process.stdout, "console: ")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            for host in (f"durafact.test:{port}", "other.test:9443", "third.test", "localhost"):
                answered = await http.get("/health", headers={"Host": host})
                assert answered.status_code == (421 if host == "localhost" else 200), host
            assert error_of(await http.get("/", headers={"Host": f"{EVIL}:{port}"}), 421)
    finally:
        process.terminate()
        await process.wait()
    wrong = await spawn("serve", "--allow-host", "http://durafact.test/", env=env, cwd=tmp_path)
    _, err = await wrong.communicate()
    assert wrong.returncode == 2
    assert err.decode().splitlines() == [
        "starter: allowed host 'http://durafact.test/' is not a host: a name or an address, "
        "with :PORT when it is not the scheme's default (durafact.example.com, 10.0.0.5:8000)"
    ]


# --- every request a browser or a program could send ------------------------------------

OWN = {f"{name}:8000" for name in ("localhost", "127.0.0.1", "[::1]")}
HEADER_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=30)
HOSTS = (
    st.sampled_from(
        [*OWN, "LOCALHOST:8000", "localhost", "localhost:8001", "evil.example:8000", "0.0.0.0:8000"]
        + ["127.0.0.1.evil.example:8000", "localhost:8000@evil.example", "[::1]:80"]
    )
    | HEADER_TEXT
)


@FAST
@given(
    host=HOSTS,
    origin=st.none() | st.builds("{}://{}".format, st.sampled_from(["http", "file"]), HOSTS),
    fetched=st.sampled_from([None, "same-origin", "none", "same-site", "cross-site"]),
    kind=st.sampled_from([None, "application/json", "text/plain", "multipart/form-data"]),
    marked=st.booleans(),
)
def test_a_change_is_taken_only_from_this_servers_own_host_and_page(
    host: str, origin: str | None, fetched: str | None, kind: str | None, marked: bool
) -> None:
    named = {"host": host, "origin": origin, "sec-fetch-site": fetched, "content-type": kind}
    named["x-durafact"] = "1" if marked else None
    headers = [(k.encode(), v.encode("latin-1")) for k, v in named.items() if v is not None]
    scope = {"type": "http", "method": "POST", "server": ("127.0.0.1", 8000), "headers": headers}
    taken = Sites("127.0.0.1").refusal(scope) is None
    from_us = origin is None or origin.lower() in {f"http://{own}" for own in OWN}
    assert taken == (
        host.lower() in OWN
        and from_us
        and fetched in (None, "same-origin", "none")
        and (kind == "application/json" or marked)
    )


# --- a real browser ---------------------------------------------------------------------


def attack_page(api: str, targets: Targets) -> str:
    """A page that tries every change against `api` (empty: its own origin): each by a
    `fetch` with JSON and by a `no-cors` fetch (a "simple" request: JSON as text/plain,
    or no body), then an HTML form to cancel the run and a text/plain form whose body is
    the JSON of an approval; then it reads what a person would. `window.outcomes` is
    what the page could tell; `window.done` once the forms' answers have loaded."""
    changes = targets.changes()
    cancel = next(path for path, _ in changes if path.endswith("/cancel"))
    approve = next(path for path, _ in changes if "/approvals/" in path)
    return f"""<!doctype html>
<meta charset="utf-8"><title>Win a prize</title>
<iframe name="one"></iframe><iframe name="two"></iframe>
<form method="post" target="one" action="{api}{cancel}"></form>
<form method="post" target="two" enctype="text/plain" action="{api}{approve}">
<input type="hidden" name='{{"approved": true, "reason": "' value='"}}'></form>
<script>
const api = {json.dumps(api)};
window.outcomes = [];
async function attempt(kind, path, init) {{
  try {{
    const response = await fetch(api + path, init);
    window.outcomes.push({{ kind, path, type: response.type, status: response.status }});
  }} catch (error) {{
    window.outcomes.push({{ kind, path, type: "error", status: 0 }});
  }}
}}
(async () => {{
  for (const [path, body] of {json.dumps(changes)}) {{
    const text = body === null ? undefined : JSON.stringify(body);
    await attempt("no-cors", path, {{ method: "POST", mode: "no-cors", body: text }});
    const headers = {{ "Content-Type": "application/json", "X-Durafact": "1" }};
    await attempt("json", path, {{ method: "POST", headers, body: text || "{{}}" }});
  }}
  for (const path of {json.dumps(targets.reads())}) await attempt("read", path, {{}});
  let loaded = 0;
  for (const frame of document.querySelectorAll("iframe")) {{
    frame.onload = () => {{ window.done = ++loaded === 2; }};
  }}
  for (const form of document.forms) form.submit();
}})();
</script>
"""


async def visit(
    browser: Browser, url: str, served: Served, html: str | None = None
) -> tuple[Page, list[Response]]:
    """A new tab at `url` once its attempts are over: the tab, and the answers `served`
    gave to what reached it. With `html`, that is the document at `url`, as the
    attacker's own server sent it before the name rebound."""
    context = await browser.new_context()
    if html is not None:
        await context.route(url, lambda route: route.fulfill(body=html, content_type="text/html"))
    page = await context.new_page()
    answers: list[Response] = []
    api_port = f":{port_of(served)}/"
    page.on("response", lambda r: answers.append(r) if api_port in r.url else None)
    await page.goto(url)
    await page.wait_for_function("window.done === true", timeout=30_000)
    return page, answers


async def test_a_page_on_another_loopback_origin_changes_nothing(
    open_console: Served,
    person: httpx.AsyncClient,
    targets: Targets,
    client: Client,
    model: ScriptedModel,
) -> None:
    async with chromium() as browser:
        page = HTMLResponse(attack_page(open_console.url, targets))
        other = Starlette(routes=[Route("/", lambda request: page)])
        async with serving(other) as url:
            tab, answers = await visit(browser, f"{url}/", open_console)
            outcomes = await tab.evaluate("window.outcomes")
    # The page learnt nothing: its answers are opaque, or the browser refused them.
    assert {(o["type"], o["status"]) for o in outcomes} <= {("opaque", 0), ("error", 0)}
    # What reached the server was refused there, not only by the browser.
    # Each `no-cors` fetch and each form; a fetch with JSON ends at its preflight.
    changes = [a for a in answers if a.request.method == "POST"]
    assert len(changes) == len(targets.changes()) + 2
    assert {a.status for a in changes} == {403}
    await targets.unchanged(client, person, model)


async def test_a_page_whose_name_rebinds_to_loopback_is_refused_everywhere(
    open_console: Served,
    person: httpx.AsyncClient,
    targets: Targets,
    client: Client,
    model: ScriptedModel,
) -> None:
    url = f"http://{EVIL}:{port_of(open_console)}/"
    async with chromium(*REBOUND) as browser:
        tab, answers = await visit(browser, url, open_console, attack_page("", targets))
        outcomes = await tab.evaluate("window.outcomes")
    # Same-origin to the browser, so the page reads every answer: each is the refusal.
    assert len(outcomes) == 2 * len(targets.changes()) + len(targets.reads())
    assert {(o["type"], o["status"]) for o in outcomes} == {("basic", 421)}
    assert {a.status for a in answers if a.url != url} == {421}
    await targets.unchanged(client, person, model)
