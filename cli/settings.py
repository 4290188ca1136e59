"""Settings read from the environment, with the defaults the whole project shares."""

from __future__ import annotations

import os

from pydantic import BaseModel

DEFAULT_ADDRESS = "localhost:7233"
DEFAULT_MODEL = "gpt-4o-mini"


class Settings(BaseModel):
    """Where Temporal and the model live.

    `temporal_address_explicit` records whether `TEMPORAL_ADDRESS` was set: only
    then does the starter refuse to start an embedded server of its own.
    """

    temporal_address: str = DEFAULT_ADDRESS
    temporal_address_explicit: bool = False
    temporal_namespace: str = "default"
    task_queue: str = "durafact"
    openai_base_url: str | None = None
    openai_api_key: str | None = None
    model: str = DEFAULT_MODEL
    ui_url: str = "http://localhost:8233"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        return cls(
            temporal_address=env.get("TEMPORAL_ADDRESS") or DEFAULT_ADDRESS,
            temporal_address_explicit=bool(env.get("TEMPORAL_ADDRESS")),
            temporal_namespace=env.get("TEMPORAL_NAMESPACE") or "default",
            task_queue=env.get("DURAFACT_TASK_QUEUE") or "durafact",
            openai_base_url=env.get("OPENAI_BASE_URL") or None,
            openai_api_key=env.get("OPENAI_API_KEY") or None,
            model=env.get("DURAFACT_MODEL") or DEFAULT_MODEL,
            ui_url=(env.get("DURAFACT_UI_URL") or "http://localhost:8233").rstrip("/"),
        )

    def workflow_url(self, workflow_id: str, run_id: str | None = None) -> str:
        """The Web UI page of one workflow (the run's page when the run is known)."""
        from urllib.parse import quote

        base = f"{self.ui_url}/namespaces/{quote(self.temporal_namespace)}/workflows/"
        url = base + quote(workflow_id, safe="")
        return f"{url}/{run_id}/history" if run_id else url
