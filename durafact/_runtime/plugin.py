"""`DurafactPlugin`: durafact's recipes on your own Temporal client and worker.

    client = await Client.connect(address, plugins=[DurafactPlugin()])
    worker = Worker(client, task_queue="my-app", workflows=[MyRecipe],
                    plugins=[DurafactPlugin(recipes=["my_app.recipes"])])

On a client it installs durafact's data converter: pydantic, the AES-GCM payload
codec when keys are configured, and external storage for large payloads
(durafact/_runtime/codec.py, durafact/_runtime/payloads.py), and asks a query again when
the worker that answered it lost a replay race with the run's close
(durafact/_runtime/query_retry.py). On a worker it adds the
activities (`request_model`, `search_source`, `resolve_ref`, `list_tools`,
`call_tool`, and the chat's `read_reply`), the ready workflows unless
`builtins=False`, the recipes of the modules it is given, the sandbox pass-through
of `durafact`, the handoff of model context in memory
(durafact/_runtime/handoff.py), and a check at start-up that the namespace has
durafact's search attributes; with a deployment and a build id, it makes the worker a
version of a Temporal worker deployment, on which runs are pinned
(durafact/_runtime/versioning.py). It closes its model
clients and MCP sessions when the worker stops. What a worker owns is made in
durafact/_runtime/worker_kit.py, imported only then, so a client's plugin loads neither
the model and source activities nor `openai` or the MCP SDK. `durafact-worker`, the
embedded stack and the tests assemble their workers this way too.

A plugin given to the client is applied to every worker of that client as well
(Temporal's rule); a worker given a `DurafactPlugin` of its own takes that one
instead, so the two lines above configure the worker once. Every setting defaults to
the environment, as for `durafact-worker`; a mistake in one is a one-line error
raised before anything runs (see `DurafactPlugin`). The command line's client is made
the same way (durafact/_runtime/connection.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import TracerProvider
from pydantic import BaseModel
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import (
    ReplayerConfig,
    Worker,
    WorkerConfig,
    WorkerDeploymentConfig,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from durafact._activities.tools import Tool, ToolCatalog
from durafact._core.prices import Prices
from durafact._core.sources import DEFAULT_ENDPOINT
from durafact._runtime.codec import Keyring, converter_for, keys_from_env
from durafact._runtime.endpoints import Endpoint, configured_endpoints
from durafact._runtime.handoff import HandoffInterceptor
from durafact._runtime.payloads import PayloadStore, store_from_env
from durafact._runtime.prices import prices_from_env
from durafact._runtime.query_retry import QueryRetry
from durafact._runtime.registry import Registry, load_registry, recipe_modules
from durafact._runtime.search_attributes import require_search_attributes
from durafact._runtime.settings import (
    DEFAULT_MODEL,
    SettingsError,
    embedded_model_url,
    state_home,
)
from durafact._runtime.stack import LOCAL_MODEL_ID, worker_on
from durafact._runtime.tracing import TRACE_CONTENT_ENV, interceptors, provider_from_env
from durafact._runtime.versioning import (
    DeploymentConfigError,
    deployment_config,
    deployment_version,
)

if TYPE_CHECKING:
    from durafact._activities.mcp import McpServer
    from durafact._runtime.worker_kit import WorkerKit

log = logging.getLogger("durafact._runtime.plugin")

NAME = "durafact.DurafactPlugin"
# The sandbox re-imports a workflow's modules on every new run. For durafact's own
# packages that cost about 0.1 s of CPU per run (rebuilding every pydantic model);
# with 50 runs starting at once on 2 cores, first workflow tasks came close to
# Temporal's 10 s task timeout. `durafact` holds no module state a run writes, so it
# is shared instead; what the sandbox would have caught in
# them, tests/workflows/test_determinism.py checks statically, and replay tests
# check behaviour. A user's own workflow modules stay fully sandboxed.
PASSTHROUGH = ("durafact",)

# The plugin on a client and one on its worker is the documented way to use it (see
# the module docstring), so the SDK's warning that the same plugin type may run twice
# is not news; `configure_worker` makes sure it runs once.
warnings.filterwarnings(
    "ignore", message=r"The same plugin type <class 'durafact\._runtime\.plugin\.DurafactPlugin'>"
)


class DurafactPlugin(SimplePlugin):
    """durafact on a Temporal `Client`, `Worker` or `Replayer`.

    Args:
        recipes: recipes modules to register besides the built-ins (`RECIPES`,
            `OUTPUT_MODELS`, `TOOLS`; durafact/_runtime/registry.py). None: the
            comma-separated `DURAFACT_RECIPES`.
        builtins: register the ready workflows (`PlanExecuteWorkflow`, ...) too.
        entry_points: register the modules of installed `durafact.recipes` entry points.
        workflows: more workflow classes to register (a worker's own `workflows=`
            are registered as they are and need not be listed).
        output_models: more models that `ctx.llm.structured(...)` calls ask for.
        tools: more `@tool` functions the workflows may call.
        mcp: MCP servers, `NAME=COMMAND` or `NAME=URL` (each worker opens its own
            session and closes it when it stops), or `McpServer` objects (whoever made
            them closes them). None: `DURAFACT_MCP`.
        endpoints: the model endpoints by name, `default` among them. None:
            `OPENAI_BASE_URL`, `OPENAI_API_KEY` and `DURAFACT_ENDPOINT_<NAME>`; with
            neither of the first two set, a worker's `default` is the embedded stack's
            local model when `durafact up` runs it, as for `durafact-worker`.
        model: the model name sent with each request. None: `DURAFACT_MODEL` (for the
            embedded stack's local model, its name).
        prices: what each model costs (durafact/_core/prices.py), for every response's
            `Usage.cost`. None: `DURAFACT_PRICES`; without a table every cost is None
            (unknown).
        payloads: where large payloads go. None: `DURAFACT_PAYLOADS` and
            `DURAFACT_PAYLOAD_THRESHOLD`.
        keys: payload encryption keys, newest first. None: `DURAFACT_KEYS` or
            `DURAFACT_KEYS_FILE`; without keys nothing is encrypted.
        check_search_attributes: refuse to run a worker in a namespace that lacks
            `DurafactRecipe` and `DurafactStatus` (its workflow tasks would fail).
        tracing: an OpenTelemetry tracer provider for Temporal's spans and a span per
            model and tool call (durafact/_runtime/tracing.py). None: the OTEL_*
            variables; off when none is set.
        deployment: the worker deployment a worker belongs to, with `build_id` the
            version of its code (durafact/_runtime/versioning.py): a run starts on the
            deployment's current version and a recipe's runs are pinned to the version
            they started on (`Recipe.upgrade_on_continue_as_new`: each run of the chain).
            None: `DURAFACT_DEPLOYMENT`; neither: the worker is not versioned.
        build_id: the version of this worker's code within `deployment` (a commit, a
            release). None: `DURAFACT_BUILD_ID`.
        env: the environment the defaults are read from (None: `os.environ`).

    The constructor raises, with a one-line reason: `EndpointError`,
    `CodecConfigError`, `PayloadConfigError`, `PricesError`, `TracingConfigError`,
    `DeploymentConfigError` (a build id without a deployment, or the reverse); the
    recipes and MCP servers are read when a worker or replayer first needs them (`registry`):
    `RegistrationError`, `McpConfigError`. A worker with no model endpoint at all is
    `NoModelEndpoint`, a SystemExit: a worker script ends with its one line.
    """

    def __init__(
        self,
        *,
        recipes: Sequence[str] | None = None,
        builtins: bool = True,
        entry_points: bool = True,
        workflows: Sequence[type] = (),
        output_models: Sequence[type[BaseModel]] = (),
        tools: Sequence[Tool] = (),
        mcp: Sequence[str | McpServer] | None = None,
        endpoints: Mapping[str, Endpoint] | None = None,
        model: str | None = None,
        prices: Prices | None = None,
        payloads: PayloadStore | None = None,
        keys: Keyring | None = None,
        check_search_attributes: bool = True,
        tracing: TracerProvider | None = None,
        deployment: str | None = None,
        build_id: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self.deployment = deployment_version(deployment, build_id, env)
        modules = recipe_modules(env=env) if recipes is None else recipe_modules(recipes, env={})
        self._registration = (modules, builtins, entry_points, workflows, output_models, tools)
        given = list(mcp) if mcp is not None else None
        self._mcp_specs = [s for s in given or () if isinstance(s, str)]
        self._mcp_objects = {s.name: s for s in given or () if not isinstance(s, str)}
        self._mcp_env = None if given is not None else env.get("DURAFACT_MCP")
        self.endpoints = dict(configured_endpoints(env) if endpoints is None else endpoints)
        self.endpoints.setdefault(DEFAULT_ENDPOINT, Endpoint(name=DEFAULT_ENDPOINT, base_url=None))
        self._env = env
        # Where a worker looks for the embedded stack's model when no endpoint is set.
        self._stack_env = env if endpoints is None else None
        self._model_given = bool(model or env.get("DURAFACT_MODEL"))
        self.model = model or env.get("DURAFACT_MODEL") or DEFAULT_MODEL
        self.prices = prices_from_env(env) if prices is None else prices
        self.payloads = store_from_env(env) if payloads is None else payloads
        self.keys = keys_from_env(env) if keys is None else keys
        self.check_search_attributes = check_search_attributes
        self.data_converter_value = converter_for(self.keys, self.payloads)
        self.tracing = provider_from_env(env) if tracing is None else tracing
        content = env.get(TRACE_CONTENT_ENV, "") == "1"
        self._tracing = interceptors(self.tracing, self.model, content) if self.tracing else []
        self._kits: list[WorkerKit] = []
        super().__init__(
            NAME, data_converter=self._converter, interceptors=[*self._tracing[:1], QueryRetry()]
        )

    @functools.cached_property
    def registry(self) -> Registry:
        """The workflows, output models and tools a worker with this plugin registers,
        loaded when first needed, so that a plugin on a client imports no recipes.
        A mistake is a RegistrationError or McpConfigError of one line."""
        modules, builtins, entry_points, workflows, output_models, tools = self._registration
        registry = load_registry(modules, entry_points=entry_points, builtins=builtins)
        registry.add(workflows, output_models, origin="DurafactPlugin", tools=tools)
        ToolCatalog(registry.tools.values(), self._mcp_servers())  # a tool and a server
        return registry

    # --- client and replayer --------------------------------------------------------

    def _converter(self, existing: DataConverter | None) -> DataConverter:
        if existing is None or existing is DataConverter.default or is_durafact(existing):
            return self.data_converter_value
        raise ValueError(
            "DurafactPlugin sets the client's data converter (pydantic, with durafact's "
            "codec and payload store), and this client has another one: leave "
            "data_converter out (keys and a payload store are DurafactPlugin's settings)"
        )

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        config["data_converter"] = self._converter(config.get("data_converter"))
        config["workflows"] = self._with_registered(config.get("workflows"))
        config["workflow_runner"] = with_passthrough(config.get("workflow_runner"))
        return config

    # --- worker ---------------------------------------------------------------------

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        if self._defers_to_another(config.get("plugins") or ()):
            return config
        client = config["client"]  # type: ignore[typeddict-item]
        self.check_model_endpoint()
        self._warn_on_the_stacks_queue(client, config["task_queue"])  # type: ignore[typeddict-item]
        if not is_durafact(client.data_converter):
            raise ValueError(
                "the worker's client has no durafact data converter: connect it with "
                "Client.connect(..., plugins=[DurafactPlugin()])"
            )
        # Here, not at the top: only a worker needs the activities and their libraries
        # (openai, mcp, ...), so a client's plugin, such as the command line's, never
        # imports them (durafact/_runtime/worker_kit.py).
        from durafact._runtime.worker_kit import WorkerKit

        kit = WorkerKit(
            client,
            self.registry,
            self._mcp_servers(),
            self._mcp_objects,
            self.endpoints,
            self.model,
            self.prices,
        )
        self._kits.append(kit)
        config["workflows"] = self._with_registered(config.get("workflows"))
        config["activities"] = [*(config.get("activities") or ()), *kit.activities]
        if self.deployment is not None:
            config["deployment_config"] = self._deployment_config(config)
        config["workflow_runner"] = with_passthrough(config.get("workflow_runner"))
        # Temporal's tracing interceptor comes from the client when this plugin is on it.
        traced = any(i in self._tracing for i in client.config(active_config=True)["interceptors"])
        config["interceptors"] = [
            *(config.get("interceptors") or ()),
            *(self._tracing[1:] if traced else self._tracing),
            HandoffInterceptor(kit.handoff),
        ]
        return config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Any]) -> None:
        kit = self._kit_of(worker)
        if kit is None:  # another DurafactPlugin configured this worker
            await next(worker)
            return
        # The check runs while the worker starts: a plugin that raised before the worker
        # ran would leave `async with worker` waiting for a shutdown that never comes.
        running = asyncio.create_task(next(worker))
        try:
            try:
                if self.check_search_attributes:
                    await require_search_attributes(worker.client)
            except BaseException:
                await worker.shutdown()
                with contextlib.suppress(Exception):
                    await running
                raise
            await running
        finally:
            self._kits.remove(kit)
            await kit.close()
            if flush := getattr(self.tracing, "force_flush", None):
                await asyncio.to_thread(flush)  # the spans of the worker's last calls

    def check_model_endpoint(self) -> None:
        """A worker's model endpoint: the configured one, else the embedded stack's local
        model when `durafact up` runs it; else NoModelEndpoint, since a worker without
        one would retry every model call against api.openai.com with no key until its
        deadline."""
        default = self.endpoints[DEFAULT_ENDPOINT]
        if default.base_url or default.api_key:
            return
        try:
            local = embedded_model_url(self._stack_env) if self._stack_env is not None else None
        except SettingsError as exc:  # a DURAFACT_MODEL_PORT that is no port
            raise NoModelEndpoint(f"no model endpoint: {exc}") from None
        if local is None:
            raise NoModelEndpoint(
                "no model endpoint: set OPENAI_BASE_URL (any OpenAI-compatible server) or "
                "OPENAI_API_KEY, give DurafactPlugin endpoints=, or run `durafact up` for "
                "the local model"
            )
        self.endpoints[DEFAULT_ENDPOINT] = Endpoint(
            name=DEFAULT_ENDPOINT, base_url=local, origin="durafact up"
        )
        if not self._model_given:
            self.model = LOCAL_MODEL_ID
            for interceptor in self._tracing[1:]:  # the GenAI spans name the model
                interceptor.default_model = LOCAL_MODEL_ID
        log.info("no model endpoint configured: using the embedded local model at %s", local)

    def _deployment_config(self, config: WorkerConfig) -> WorkerDeploymentConfig:
        """The worker's deployment options: this plugin's version, pinned by default."""
        assert self.deployment is not None
        if config.get("deployment_config") is not None or config.get("build_id"):
            raise DeploymentConfigError(
                f"the worker has versioning options of its own and DurafactPlugin the "
                f"deployment {self.deployment.to_canonical_string()}: give only one"
            )
        return deployment_config(self.deployment)

    def _warn_on_the_stacks_queue(self, client: Any, task_queue: str) -> None:
        """A warning when the embedded stack's worker polls this worker's queue: Temporal
        hands a task to either, and a recipe only one of them registers fails on the
        other ("not registered on this worker")."""
        address = client.service_client.config.target_host
        pid = worker_on(state_home(self._env), address, task_queue)
        if pid is not None:
            log.warning(
                "task queue %r is polled by the embedded stack's worker too (durafact up, "
                "pid %s): each takes tasks of recipes only the other may have registered; "
                "give this worker a queue of its own (DURAFACT_TASK_QUEUE, or "
                "Worker(task_queue=...))",
                task_queue,
                pid,
            )

    def _defers_to_another(self, worker_plugins: Sequence[Any]) -> bool:
        """Whether this plugin came from the client of a worker that has a DurafactPlugin
        of its own: that one configures the worker."""
        own = [p for p in worker_plugins if isinstance(p, DurafactPlugin)]
        return bool(own) and self not in own

    def _kit_of(self, worker: Worker) -> WorkerKit | None:
        activities = worker.config(active_config=True).get("activities") or []
        return next((k for k in self._kits if k.activities[0] in activities), None)

    def _with_registered(self, given: Sequence[type] | None) -> list[type]:
        """The worker's own workflows, then the registered ones it does not have yet."""
        workflows = list(given or ())
        names = {cls.__name__ for cls in workflows}
        return workflows + [cls for cls in self.registry.classes if cls.__name__ not in names]

    def _mcp_servers(self) -> dict[str, McpServer]:
        """New sessions for the configured servers, and the given server objects."""
        # Here, not at the top: only a worker or a replayer reads the MCP servers, and
        # the mcp SDK takes longer to import than all the rest of a client's plugin.
        from durafact._activities.mcp import configured_servers

        return {**configured_servers(self._mcp_specs, self._mcp_env), **self._mcp_objects}


class NoModelEndpoint(SystemExit):
    """A worker has no model endpoint: none is configured and `durafact up` runs no local
    model. A SystemExit, so that a worker script ends with this one line, naming the
    fix, and exit code 1, as `durafact-worker` does, instead of a traceback."""


def is_durafact(converter: DataConverter) -> bool:
    """Whether `converter` converts pydantic models, as durafact's workflows need."""
    return issubclass(converter.payload_converter_class, PydanticPayloadConverter)


def with_passthrough(runner: WorkflowRunner | None) -> WorkflowRunner:
    """`runner` (default: the sandbox) sharing `durafact` across runs."""
    if runner is None:
        return SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH)
        )
    if isinstance(runner, SandboxedWorkflowRunner):
        restrictions = runner.restrictions.with_passthrough_modules(*PASSTHROUGH)
        return dataclasses.replace(runner, restrictions=restrictions)
    return runner  # an unsandboxed runner shares every module already


__all__ = ["DurafactPlugin"]
