"""Worker processes for the scale-out test and bench: `durafact-worker` as
`tests.helpers.start_worker` runs it, each with a scripted model server of its own (so
every model call is known to come from one process), its stderr read as it comes (a
worker that logs a lot never blocks on a full pipe), and stopped on the way out."""

from __future__ import annotations

import asyncio
import subprocess
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from temporalio.client import Client

from durafact._runtime.settings import Settings
from durafact.testing import Call, ScriptedModel
from tests.helpers import start_worker


class WorkerProcess:
    """One `durafact-worker` and the scripted model only it talks to."""

    def __init__(self, client: Client, settings: Settings, reply: Callable[[Call], object]) -> None:
        self.model = ScriptedModel().start()
        self.model.reply(reply)  # type: ignore[arg-type]
        own = settings.model_copy(update={"openai_base_url": self.model.url})
        self.process = start_worker(client, own)
        self.log: list[str] = []
        self._polling = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line.decode(errors="replace"))
            if b"worker polling" in line:
                self._polling.set()

    async def polling(self, timeout: float = 120) -> None:
        """Once the worker polls its task queue."""
        if not await asyncio.to_thread(self._polling.wait, timeout):
            raise AssertionError("the worker never polled:\n" + "".join(self.log))

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, whatever it was doing."""
        self.process.kill()
        self.process.wait()

    def stop(self) -> int:
        """SIGTERM and wait (SIGKILL after 30 s); the exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.model.stop()
        return self.process.returncode


@asynccontextmanager
async def worker_processes(
    client: Client, settings: Settings, count: int, reply: Callable[[Call], object]
) -> AsyncIterator[list[WorkerProcess]]:
    """`count` worker processes on `settings.task_queue`, all polling; stopped on exit."""
    workers: list[WorkerProcess] = []
    try:
        for _ in range(count):
            workers.append(WorkerProcess(client, settings, reply))
        for worker in workers:
            await worker.polling()
        yield workers
    finally:
        for worker in workers:
            worker.stop()
