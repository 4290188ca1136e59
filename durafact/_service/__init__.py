"""The operations every front door presents: the command line (durafact/_cli/), the
HTTP API and console (durafact/_api/), and any later one. Plain async functions over a
Temporal client, the settings and the registry; typed results; domain errors
(errors.py) that each door turns into its own words, in one place.

- start: launch.py (a registered type with JSON input, a recipe's own command), with
  the checks of inputs.py and the worker checks of registration.py;
- list: listing.py;
- describe, usage, recipe status, progress, step agents: runs.py; troubles: troubles.py;
- pending, decide (and approve): approvals.py;
- cancel: cancel.py; steer: steering.py; a chat's messages and stop: chats.py;
- ledger, provenance: ledger.py; fork a finished run from an edited artifact: forks.py;
- eval (closed runs re-run on the current code, recorded answers reused): evaluation.py.

Only this layer and the registry know the recipes (durafact/_recipes/): a front door
asks the registry what a recipe declares (`Recipe.command`, `steerable`, `chat`, ...),
never its type name (tests/test_layout.py).
"""
