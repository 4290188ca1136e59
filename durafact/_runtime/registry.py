"""Which recipes the worker runs and the command line starts.

A recipes module lists its workflow classes, and the pydantic models their
`ctx.llm.structured(...)` calls ask for:

    RECIPES = [TripPlanner]          # @workflow.defn classes
    OUTPUT_MODELS = [Cities]         # optional: only what structured calls need
    TOOLS = [weather]                # optional: @tool functions (durafact/_activities/tools.py)
    ACTIVITIES = [forecast]          # optional: @activity.defn functions your recipes call

A module may list only TOOLS or ACTIVITIES. The built-ins register the same way (`workflows`, and
the built-in tools' `durafact._activities.calculator`). The worker and the command line
load, besides the built-ins:

- the modules named by `--recipes MODULE[,MODULE...]` (repeatable) and by
  `DURAFACT_RECIPES=MODULE,...` (imported from the current directory too);
- the module each entry point of the group `durafact.recipes` names, in every
  installed distribution (`[project.entry-points."durafact.recipes"]
  trips = "my_pkg.recipes"`).

A module that cannot be imported, has neither RECIPES nor TOOLS, lists something that
is not a workflow class, a model or a tool, or two recipes with one workflow type name
(two tools with one name, two commands with one name): each is a `RegistrationError` of
one line, raised before anything starts.

What a recipe declares on its class (its command, whether it takes notes, can be
stopped, is a chat, has correctable facts or step agents, moves to a new version of
the code at continue-as-new, forks, how its result reads:
`Recipe`'s class variables) is read here, on `Registered`; the command line, the HTTP
API and the console ask the registry, never a recipe's type name.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from pydantic import BaseModel

from durafact._activities.tools import Tool
from durafact._core.commands import Command
from durafact._core.forks import ForkRules
from durafact._core.ledger import Ledger
from durafact._core.llm import type_path

ENTRY_POINT_GROUP = "durafact.recipes"
ENV_VAR = "DURAFACT_RECIPES"
BUILTIN_MODULE = "durafact._recipes"
BUILTIN_TOOL_MODULES = ("durafact._activities.calculator",)
HOW = "a recipes module lists RECIPES = [...] and OUTPUT_MODELS = [...]"


class RegistrationError(Exception):
    """A one-line reason the registered recipes cannot be used."""


@dataclass(frozen=True)
class Registered:
    """One registered workflow: its type name, class, and where it was registered.

    Read with public API only: the `@workflow.run` method is the class's `run` (as in
    every recipe), its input and result types come from its annotations, and the type
    name is the class name (`@workflow.defn` without `name=`). The command line starts a
    run through `run_fn`, so Temporal names its type itself.
    """

    name: str
    cls: type
    origin: str

    @property
    def run_fn(self) -> Any:
        return self.cls.run  # type: ignore[attr-defined]

    @property
    def inputs(self) -> list[Any] | None:
        """The run method's parameter types (without self); None when not all are
        annotated. An unannotated parameter counts as `Any`."""
        params = list(inspect.signature(self.run_fn).parameters.values())[1:]
        hints = self._hints()
        if hints is None or any(p.name not in hints for p in params):
            return [Any] * len(params) if hints is None else None
        return [hints[p.name] for p in params]

    @property
    def result_type(self) -> Any:
        return (self._hints() or {}).get("return")

    # What the recipe declares the front doors may do with its runs (`Recipe`'s class
    # variables, durafact/_recipes/recipe.py), read with the same defaults from a workflow
    # class that is no Recipe.

    @property
    def recipe_name(self) -> str:
        """What the `DurafactRecipe` search attribute holds: the recipe's own name."""
        return getattr(self.cls, "recipe_name", None) or self.name

    @property
    def command(self) -> Command | None:
        """Its own command; only the class that declares it has it (a subclass of a ready
        workflow is not `plan` too)."""
        return vars(self.cls).get("command")

    @property
    def steerable(self) -> bool:
        return bool(getattr(self.cls, "steerable", False))

    @property
    def stoppable(self) -> bool:
        return bool(getattr(self.cls, "stoppable", False))

    @property
    def chat(self) -> bool:
        return bool(getattr(self.cls, "chat", False))

    @property
    def step_agents(self) -> bool:
        return bool(getattr(self.cls, "step_agents", False))

    @property
    def upgrade_on_continue_as_new(self) -> bool:
        """Whether its next run after a continue-as-new starts on the worker
        deployment's current version (every run is pinned to the one it started on)."""
        return bool(getattr(self.cls, "upgrade_on_continue_as_new", False))

    @property
    def forks(self) -> bool:
        """Whether a finished run can be forked from an edited artifact (`durafact fork`)."""
        return bool(getattr(self.cls, "forks", False))

    def fork_rules(self, ledger: Ledger) -> ForkRules | None:
        """How the run whose artifacts are `ledger` was built, as the recipe says
        (`Recipe.fork_rules`); None when the recipe does not fork, or not that run."""
        rules = getattr(self.cls, "fork_rules", None)
        return rules(ledger) if self.forks and rules is not None else None

    @property
    def correctable(self) -> tuple[str, ...]:
        """The names of the facts a rejection may correct."""
        facts = getattr(self.cls, "correctable", None)
        return tuple(facts.model_fields) if facts is not None else ()

    @property
    def takes_notes(self) -> bool:
        """Whether a note goes by the update `steer`: to the run, or to its step's agent (a
        chat takes one as a message)."""
        return (self.steerable and not self.chat) or self.step_agents

    def shown(self, result: Any, ledger: Ledger | None) -> str | None:
        """The result as the recipe shows it (`show_result`); None when it declares no
        way, or `result` is not of its result type (not decoded as one)."""
        kind = self.result_type
        if not self.shows_result or (isinstance(kind, type) and not isinstance(result, kind)):
            return None
        return self.cls.show_result(result, ledger)  # type: ignore[attr-defined]

    @property
    def shows_result(self) -> bool:
        """Whether the class declares how its result reads: only the class itself, as
        for its command (a subclass of a ready workflow may return another result)."""
        return vars(self.cls).get("show_result") is not None

    def _hints(self) -> dict[str, Any] | None:
        try:
            return typing.get_type_hints(self.run_fn)
        except (NameError, TypeError):  # an annotation that does not resolve
            return None


@dataclass
class Registry:
    """The registered workflows by type name, output models by `type_path`, and tools
    by name."""

    workflows: dict[str, Registered] = field(default_factory=dict)
    output_models: dict[str, type[BaseModel]] = field(default_factory=dict)
    tools: dict[str, Tool] = field(default_factory=dict)
    activities: dict[str, Callable[..., Any]] = field(default_factory=dict)
    modules: list[str] = field(default_factory=list)

    @property
    def classes(self) -> list[type]:
        return [r.cls for r in self.workflows.values()]

    def names(self) -> list[str]:
        return sorted(self.workflows)

    def get(self, name: str) -> Registered | None:
        return self.workflows.get(name)

    def commands(self) -> dict[str, Registered]:
        """The recipes that declare a command of their own, by the command's name."""
        return {r.command.name: r for r in self.workflows.values() if r.command is not None}

    def chat_recipe(self) -> Registered | None:
        """The conversation `durafact chat` and `/api/chats` start: the first registered
        recipe that declares itself a chat."""
        return next((r for r in self.workflows.values() if r.chat), None)

    def add(
        self,
        workflows: Iterable[Any],
        output_models: Iterable[Any] = (),
        origin: str = "build_worker",
        tools: Iterable[Any] = (),
        activities: Iterable[Any] = (),
    ) -> Registry:
        """Register workflow classes, output models, tools and activities; the same one
        twice is one."""
        for cls in workflows:
            self._add_workflow(cls, origin)
        for model in output_models:
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                raise RegistrationError(f"{origin}: {model!r} is not a pydantic model class")
            self.output_models[type_path(model)] = model
        for one in tools:
            self._add_tool(one, origin)
        for fn in activities:
            self._add_activity(fn, origin)
        return self

    def add_module(self, name: str, origin: str | None = None) -> Registry:
        """Import a recipes module and register what it lists."""
        where = f"{origin}: " if origin else ""
        if name in self.modules:
            return self
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            hint = ""
            if isinstance(exc, ModuleNotFoundError) and exc.name and name.startswith(exc.name):
                hint = " (is it on PYTHONPATH, installed, or under the current directory?)"
            raise RegistrationError(
                f"{where}recipes module {name!r} cannot be imported: "
                f"{type(exc).__name__}: {one_line(str(exc))}{hint}"
            ) from None
        lists = {
            attribute: getattr(module, attribute, None)
            for attribute in ("RECIPES", "OUTPUT_MODELS", "TOOLS", "ACTIVITIES")
        }
        if lists["RECIPES"] is None and lists["TOOLS"] is None and lists["ACTIVITIES"] is None:
            raise RegistrationError(f"{where}recipes module {name!r} has no RECIPES ({HOW})")
        for attribute, value in lists.items():
            if value is not None and (
                isinstance(value, str | bytes) or not isinstance(value, Sequence)
            ):
                raise RegistrationError(f"{where}{name}.{attribute} is not a list ({HOW})")
        self.modules.append(name)
        recipes, models, tools, activities = (value or () for value in lists.values())
        return self.add(
            recipes, models, origin=f"{where}{name}", tools=tools, activities=activities
        )

    def _add_tool(self, one: Any, origin: str) -> None:
        if not isinstance(one, Tool):
            raise RegistrationError(
                f"{origin}: TOOLS lists {describe(one)}, not a tool "
                "(a function decorated with @tool from durafact._activities.tools)"
            )
        known = self.tools.get(one.name)
        if known is not None and known is not one:
            raise RegistrationError(
                f"tool {one.name!r} is registered twice: {tool_origin(known)} and "
                f"{tool_origin(one)} ({origin})"
            )
        self.tools.setdefault(one.name, one)

    def _add_activity(self, fn: Any, origin: str) -> None:
        definition = getattr(fn, "__temporal_activity_definition", None)
        if definition is None or not callable(fn):
            raise RegistrationError(
                f"{origin}: ACTIVITIES lists {describe(fn)}, not an activity "
                "(a function decorated with @activity.defn)"
            )
        known = self.activities.get(definition.name)
        if known is not None and known is not fn:
            raise RegistrationError(
                f"activity {definition.name!r} is registered twice: {qualified(known)} and "
                f"{qualified(fn)} ({origin})"
            )
        self.activities.setdefault(definition.name, fn)

    def _add_workflow(self, cls: Any, origin: str) -> None:
        run = getattr(cls, "run", None) if isinstance(cls, type) else None
        if not inspect.iscoroutinefunction(run):
            raise RegistrationError(
                f"{origin}: RECIPES lists {describe(cls)}, not a workflow class "
                "(a class decorated with @workflow.defn whose @workflow.run method is `run`)"
            )
        known = self.workflows.get(cls.__name__)
        if known is not None and known.cls is not cls:
            raise RegistrationError(
                f"workflow type {cls.__name__!r} is registered twice: "
                f"{qualified(known.cls)} ({known.origin}) and {qualified(cls)} ({origin})"
            )
        recipe = Registered(cls.__name__, cls, origin)
        command = recipe.command
        if command is not None and not isinstance(command, Command):
            raise RegistrationError(f"{qualified(cls)}.command is not a Command ({origin})")
        other = self.commands().get(command.name) if command is not None else None
        if command is not None and other is not None and other.cls is not cls:
            raise RegistrationError(
                f"command {command.name!r} is declared twice: by {qualified(other.cls)} "
                f"({other.origin}) and {qualified(cls)} ({origin})"
            )
        self.workflows.setdefault(cls.__name__, recipe)


def builtin_registry(workflows: bool = True) -> Registry:
    """The ready workflows (unless `workflows` is False), their output models and the
    built-in tools: what every worker runs."""
    registry = Registry().add_module(BUILTIN_MODULE) if workflows else Registry()
    for name in BUILTIN_TOOL_MODULES:
        registry.add_module(name)
    return registry


def recipe_modules(options: Sequence[str] = (), env: Mapping[str, str] | None = None) -> list[str]:
    """The module names of `--recipes` options and DURAFACT_RECIPES, comma lists split,
    in order, each once."""
    env = os.environ if env is None else env
    names: list[str] = []
    for value in [env.get(ENV_VAR, ""), *options]:
        for name in value.split(","):
            if name.strip() and name.strip() not in names:
                names.append(name.strip())
    return names


def load_registry(
    modules: Sequence[str] = (), *, entry_points: bool = True, builtins: bool = True
) -> Registry:
    """The built-ins (without the ready workflows when `builtins` is False), the entry
    points' modules (unless `entry_points` is False), and `modules` (see
    `recipe_modules`)."""
    registry = builtin_registry(workflows=builtins)
    if entry_points:
        for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = entry_point.dist
            origin = f"entry point {entry_point.name!r} ({ENTRY_POINT_GROUP})"
            if dist is not None:
                origin += f" of {dist.name} {dist.version}"
            if entry_point.attr:
                raise RegistrationError(
                    f"{origin}: {entry_point.value!r} must name a module, not an attribute"
                )
            registry.add_module(entry_point.module, origin)
    if modules and os.getcwd() not in sys.path and "" not in sys.path:
        # Like `python -m`: a recipes module in the current directory is found, but
        # after everything else, so nothing there shadows an installed module.
        sys.path.append(os.getcwd())
    for name in modules:
        registry.add_module(name)
    return registry


def describe(value: Any) -> str:
    if isinstance(value, type):
        return qualified(value)
    return f"{value!r} ({type(value).__name__})"


def qualified(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def tool_origin(one: Tool) -> str:
    return f"{one.fn.__module__}:{one.fn.__qualname__}"


def one_line(text: str) -> str:
    return " ".join(text.split())
