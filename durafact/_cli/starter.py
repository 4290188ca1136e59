"""The durafact command line: `python starter.py --help` (installed: `durafact`).

Every command and option is in durafact/_cli/arguments.py; what a command does is
durafact/_cli/dispatch.py and the module it names. Reading the arguments needs nothing
but the core, so `--help` and a usage mistake answer at once; a command imports the
Temporal client, the workflows and the runtime once its arguments are read.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from durafact._cli.arguments import decoded, parser
from durafact._cli.output import Failed, exit_now, fail, one_line


async def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(decoded(sys.argv[1:] if argv is None else argv))
        # Imported here, once the arguments are read: `--help` and a usage mistake never
        # pay for the Temporal client, the workflows and the runtime that commands use.
        from durafact._cli.dispatch import dispatch

        return await dispatch(args)
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


def run() -> NoReturn:
    """The console script `durafact` and `python starter.py`."""
    try:
        exit_now(None, asyncio.run(main()))
    except KeyboardInterrupt:
        exit_now(None, 130)


if __name__ == "__main__":
    run()
