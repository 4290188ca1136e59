"""The `durafact` command: the command line (durafact/_cli/), with the HTTP API and web
console (durafact/_api/) as its `serve` command. Neither front door imports the other
(tests/test_layout.py); this module joins them, and imports the API only for `serve`.
"""

from __future__ import annotations

from typing import Any, NoReturn

from durafact._cli.starter import run as run_command_line


def serve() -> Any:
    """`durafact serve`: the web stack, imported only for this command."""
    from durafact._api.serve import serve

    return serve


DOORS = {"serve": serve}


def run() -> NoReturn:
    """The console script `durafact`, `python -m durafact` and `python starter.py`."""
    run_command_line(DOORS)
