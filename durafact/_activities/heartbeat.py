"""Heartbeating while an activity waits: what every long activity call shares (model
requests, source searches and resolves, tool calls)."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity


async def heartbeating(awaitable: Any, every: float = 2.0) -> Any:
    """Await `awaitable` while heartbeating, so a dead worker is noticed within the
    heartbeat timeout rather than the (much longer) start-to-close timeout."""
    task = asyncio.ensure_future(awaitable)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
            activity.heartbeat()
    finally:
        task.cancel()
