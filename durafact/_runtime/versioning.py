"""Worker deployment versioning: what `DurafactPlugin(deployment=..., build_id=...)` and
`durafact-worker --deployment NAME --build-id ID` give Temporal.

A worker of a deployment version (`NAME.ID`) takes only the tasks of runs that version
owns: a new run starts on the deployment's current version (`temporal worker
deployment set-current-version`), and every durafact recipe is pinned there
(`VersioningBehavior.PINNED`, the worker's default for a workflow that declares no
behaviour of its own): it finishes on the code it started with, so a deploy never
replays a run on code it did not start on. A recipe that declares
`upgrade_on_continue_as_new` (the chat and the ReAct loop: durafact/_recipes/recipe.py)
is pinned run by run, and its next run starts on the current version. A workflow
decorated `@workflow.defn(versioning_behavior=VersioningBehavior.AUTO_UPGRADE)` keeps
that: each of its tasks goes to the current version.

Without a deployment nothing changes: the worker is unversioned, as before.
"""

from __future__ import annotations

from collections.abc import Mapping

from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import WorkerDeploymentConfig

DEPLOYMENT_ENV = "DURAFACT_DEPLOYMENT"
BUILD_ID_ENV = "DURAFACT_BUILD_ID"
# The server's limit on a build id. A worker whose version the server refuses polls on
# without a word (as with a '.' in the deployment name), so both are checked here.
MAX_BUILD_ID = 255


class DeploymentConfigError(ValueError):
    """A one-line reason the deployment options cannot be used."""


def deployment_version(
    deployment: str | None, build_id: str | None, env: Mapping[str, str]
) -> WorkerDeploymentVersion | None:
    """The version `deployment` and `build_id` name (each None: its variable,
    DURAFACT_DEPLOYMENT, DURAFACT_BUILD_ID); None when neither is set. One without the
    other, or a name Temporal refuses, is a DeploymentConfigError."""
    name = (env.get(DEPLOYMENT_ENV, "") if deployment is None else deployment).strip()
    build = (env.get(BUILD_ID_ENV, "") if build_id is None else build_id).strip()
    if not name and not build:
        return None
    if not build:
        raise DeploymentConfigError(
            f"deployment {name!r} needs a build id: the version of this worker's code "
            f"(--build-id ID, DurafactPlugin(build_id=...) or {BUILD_ID_ENV})"
        )
    if not name:
        raise DeploymentConfigError(
            f"build id {build!r} needs a deployment: the name of the workers it belongs "
            f"to (--deployment NAME, DurafactPlugin(deployment=...) or {DEPLOYMENT_ENV})"
        )
    if "." in name:  # the version's canonical name is NAME.ID
        raise DeploymentConfigError(f"deployment {name!r}: a deployment name has no '.'")
    if len(build) > MAX_BUILD_ID:
        raise DeploymentConfigError(
            f"build id {build[:20]!r}...: at most {MAX_BUILD_ID} characters, not {len(build)}"
        )
    return WorkerDeploymentVersion(deployment_name=name, build_id=build)


def deployment_config(version: WorkerDeploymentVersion) -> WorkerDeploymentConfig:
    """A versioned worker's options: its version, and runs pinned to it unless their
    workflow declares another behaviour."""
    return WorkerDeploymentConfig(
        version=version,
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )
