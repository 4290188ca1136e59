"""The web console's pages: server-rendered shells, one per page, that the console's
plain JavaScript (static/, no build step) fills from the same API every other client
uses. A page holds no data of a run, so it needs no token to load; its first API call
does, and then the page asks for the token once (kept in the tab's session storage).
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse

STATIC = Path(__file__).resolve().parent / "static"
router = APIRouter(include_in_schema=False)

NAV = (("/", "Runs"), ("/approvals", "Approvals"), ("/chats", "Chats"), ("/docs", "API"))


def page(name: str, title: str, main: str, **data: str) -> HTMLResponse:
    """The shell of page `name`: the header, `main` (markup without data), the token
    form, and the page's script; `data` goes to <body data-*> (escaped)."""
    attributes = "".join(f' data-{key}="{escape(value)}"' for key, value in data.items())
    links = "".join(f'<a href="{href}">{label}</a>' for href, label in NAV)
    return HTMLResponse(
        f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)} · durafact</title>
<link rel="icon" href="/static/console/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/static/console/console.css">
</head>
<body data-page="{name}"{attributes}>
<header><a class="brand" href="/">durafact</a><nav>{links}</nav></header>
<form id="token-form" class="card" hidden>
<label for="token">This console needs its API token (<code>DURAFACT_API_TOKEN</code>).</label>
<input id="token" type="password" autocomplete="off" required>
<button type="submit">Use token</button>
</form>
<p id="problem" class="problem" role="alert" hidden></p>
<main>{main}</main>
<script type="module" src="/static/console/{name}.js"></script>
</body>
</html>
"""
    )


@router.get("/favicon.ico")
async def favicon() -> FileResponse:
    """The icon a browser or a bookmark asks for where no page names one (the pages link
    favicon.svg, the same "d" drawn as vectors)."""
    return FileResponse(STATIC / "favicon.ico", media_type="image/x-icon")


@router.get("/")
async def runs_page() -> HTMLResponse:
    return page("runs", "Runs", (STATIC / "runs.html").read_text())


@router.get("/runs/{workflow_id:path}")
async def run_page(workflow_id: str) -> HTMLResponse:
    return page("run", workflow_id, (STATIC / "run.html").read_text(), id=workflow_id)


@router.get("/approvals")
async def approvals_page() -> HTMLResponse:
    return page("approvals", "Approvals", (STATIC / "approvals.html").read_text())


@router.get("/chats")
async def chats_page() -> HTMLResponse:
    return page("chats", "Chats", (STATIC / "chats.html").read_text())


@router.get("/chats/{chat_id:path}")
async def chat_page(chat_id: str) -> HTMLResponse:
    return page("chat", chat_id, (STATIC / "chat.html").read_text(), id=chat_id)
