"""durafact: durable agent recipes on Temporal.

This package is the pure core shared by workflows and activities: artifacts and
the ledger, stable ids and settings. Nothing here does I/O at import time, so it
is safe inside the Temporal workflow sandbox.
"""

from durafact.ids import final_id, result_id, step_id, text_key
from durafact.ledger import (
    Artifact,
    Ledger,
    LedgerError,
    Link,
    ProvenanceNode,
    find,
    find_all,
)
from durafact.settings import Settings

__all__ = [
    "Artifact",
    "Ledger",
    "LedgerError",
    "Link",
    "ProvenanceNode",
    "Settings",
    "final_id",
    "find",
    "find_all",
    "result_id",
    "step_id",
    "text_key",
]
