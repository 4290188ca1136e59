"""How durafact's processes (the worker, the codec server) log: INFO lines on stderr,
every URL in them without credentials (durafact/_core/redaction.py).

The HTTP clients' own loggers stay at WARNING: at INFO, httpx logs each request with its
full URL (`HTTP Request: POST http://user:password@host/v1/chat/completions`), one line
per model call that says nothing the worker's own lines and Temporal's history do not.
The openai client uses httpx2 and httpcore2 (its own copies); MCP and web sources, httpx.
"""

from __future__ import annotations

import logging

from durafact._core.redaction import RedactingFormatter

FORMAT = "%(asctime)s %(name)s %(message)s"
QUIET = ("httpx", "httpcore", "httpx2", "httpcore2")


def configure_logging() -> None:
    """The process's root handler: stderr at INFO, redacted; the HTTP clients at WARNING."""
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter(FORMAT))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
