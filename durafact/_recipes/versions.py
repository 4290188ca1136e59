"""The baseline patch: how a new run takes the new path of every older patch at once.

Each `workflow.patched` call that a run takes costs it a marker event and an upsert of
TemporalChangeVersion, about 1.1 KB of history, and a short run paid that once per
patch. Runs started since BASELINE took the new path of every patch older than it (the
patch ids beside the code they guard: durafact/_recipes/recipe.py,
durafact/_recipes/approvals.py and the recipes' modules), so they record one marker;
`patched(OLD_PATCH)` is true in such a run without a marker of its own. A patch made
after BASELINE is checked with `workflow.patched` itself, as usual, or may be folded
into a later baseline the same way.
"""

from __future__ import annotations

from temporalio import workflow

BASELINE = "durafact-baseline-2026-12"


def patched(patch_id: str) -> bool:
    """`workflow.patched(patch_id)` for a patch older than BASELINE: true, with no marker
    of its own, in a run that has BASELINE's. `Recipe.execute` asks for BASELINE first,
    so a run's answer is fixed as it starts (the SDK remembers it for the run)."""
    return workflow.patched(BASELINE) or workflow.patched(patch_id)
