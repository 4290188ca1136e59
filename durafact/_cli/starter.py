"""The durafact command line: `python starter.py --help` (installed: `durafact`).

Every command and option is in durafact/_cli/arguments.py; what a command does is
durafact/_cli/dispatch.py and the module it names. Reading the arguments needs nothing
but the core, so `--help` and a usage mistake answer at once; a command imports the
Temporal client, the service layer and the runtime once its arguments are read.

A reason to stop is one line, `starter: <reason>`: the command line's own (`Failed`)
or an operation's (durafact/_service/errors.py), with exit code 2 for what was given
wrong and 1 for the rest. `serve` runs another front door, which this package does not
import: durafact/_main.py passes it in (`doors`).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from durafact._cli.arguments import read
from durafact._cli.output import Failed, exit_now, fail, one_line


async def main(argv: Sequence[str] | None = None, doors: Mapping[str, Any] | None = None) -> int:
    try:
        args = read(sys.argv[1:] if argv is None else argv)
        # Imported here, once the arguments are read: `--help` and a usage mistake never
        # pay for the Temporal client, the workflows and the runtime that commands use.
        from durafact._cli.dispatch import dispatch
        from durafact._service.errors import Invalid, ServiceError, UnknownType

        try:
            return await dispatch(args, doors or {})
        except ServiceError as exc:
            fail(str(exc))
            return 2 if isinstance(exc, Invalid | UnknownType) else 1
    except Failed as exc:
        fail(str(exc))
        return exc.code
    except BrokenPipeError:  # e.g. `| head`: the reader has gone, nothing to tell
        return 1
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except Exception as exc:
        if os.environ.get("DURAFACT_DEBUG"):
            raise
        fail(f"{type(exc).__name__}: {one_line(str(exc))} (DURAFACT_DEBUG=1 shows the traceback)")
        return 1


def run(doors: Mapping[str, Any] | None = None) -> NoReturn:
    """The console script `durafact` and `python starter.py`, with the front doors
    `doors` serves (durafact/_main.py)."""
    try:
        exit_now(None, asyncio.run(main(doors=doors)))
    except KeyboardInterrupt:
        exit_now(None, 130)
