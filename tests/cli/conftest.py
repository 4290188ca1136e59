"""Fixtures of the command-line tests."""

from __future__ import annotations

import pytest
from temporalio.testing import WorkflowEnvironment

from durafact._runtime.settings import Settings
from durafact.testing import ScriptedModel
from tests.helpers import clean_env


@pytest.fixture
def starter_env(env: WorkflowEnvironment, worker: Settings, model: ScriptedModel) -> dict[str, str]:
    """The starter on the session server, on the task queue the in-process worker serves."""
    return clean_env(
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        DURAFACT_TASK_QUEUE=worker.task_queue,
        OPENAI_BASE_URL=model.url,
    )
