"""Credentials out of what is shown: URLs as they may be logged, printed or stored.

An endpoint URL may carry a secret (`http://user:secret@host/v1?api_key=...`). Before
a URL reaches a log, a message, a status line, an activity summary, an error or an
artifact, `redact_url` drops its user name and password and replaces every query
value with `***`; `redact_urls` does that to each URL inside a text (an endpoint's
error body may echo the URL it was sent to); `RedactingFormatter` does that to every log
line a process writes, its tracebacks included.
"""

from __future__ import annotations

import logging
import re

HIDDEN = "***"
# A URL inside text: a scheme, then anything up to whitespace or a closing quote/bracket.
_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>()\[\]{}]+")
_USERINFO = re.compile(r"(?<=//)[^/@?#]*@")


def redact_url(url: str | None) -> str:
    """`url` without credentials, for any string (a malformed URL too); None is the
    openai client's own endpoint, `api.openai.com`."""
    if not url:
        return "api.openai.com"
    base, _, query = url.split("#", 1)[0].partition("?")
    base = _USERINFO.sub("", base, count=1)
    if not query:
        return base
    return base + "?" + "&".join(f"{part.split('=', 1)[0]}={HIDDEN}" for part in query.split("&"))


def redact_urls(text: str) -> str:
    """`text` with every URL in it redacted."""
    return _URL.sub(lambda match: redact_url(match.group(0)), text)


class RedactingFormatter(logging.Formatter):
    """A formatter whose lines show every URL redacted: a library's logger (the HTTP
    client's, Temporal's) may print the URL a request went to, or an error that echoes it."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_urls(super().format(record))
