"""What a recipe declares on its class (`Recipe.command`, `steerable`, `chat`,
`correctable`, `step_agents`, `show_result`) is read by the registry the same way for a
recipe of yours as for the ready ones, and the front doors read only the registry: a
user's recipe that declares correctable facts gets its corrections checked, a user's
steerable recipe takes notes, and a command name belongs to one recipe."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from temporalio import workflow

from durafact import (
    Command,
    Option,
    PlanExecuteWorkflow,
    ReAct,
    Recipe,
    RecipeContext,
)
from durafact._core.ready_commands import READY_COMMANDS
from durafact._runtime.registry import RegistrationError, Registry, load_registry
from durafact._service.approvals import check_changes
from durafact._service.errors import Invalid
from durafact._service.launch import launch_of_command
from tests.sized_answer_flow import SizedAnswerFlow  # a ready workflow, subclassed


class Order(BaseModel):
    item: str
    count: int = 1


class Terms(BaseModel):
    """What a rejection of an order may correct."""

    price: str | None = None
    delivery: str | None = None


@workflow.defn
class OrderDesk(Recipe[Order, Order]):
    command = Command(
        "order",
        "order an item",
        argument="item",
        options=[Option("--count", type=int, help="how many")],
    )
    correctable = Terms

    @workflow.run
    async def run(self, order: Order) -> Order:
        return await self.execute(order)

    async def lifecycle(self, ctx: RecipeContext, order: Order) -> Order:
        return order


@workflow.defn
class Helpdesk(ReAct[Order, Order]):
    """A tool loop of the user's own: a ReAct, so it takes a person's note."""

    @workflow.run
    async def run(self, order: Order) -> Order:
        return await self.execute(order)


def test_the_ready_workflows_declare_the_commands_the_arguments_are_read_with() -> None:
    declared = {name: r.cls for name, r in load_registry([], entry_points=False).commands().items()}
    assert {command.name for command in READY_COMMANDS} == set(declared)
    assert declared["plan"] is PlanExecuteWorkflow


def test_a_users_recipe_gets_its_command_its_facts_and_its_notes_from_its_class() -> None:
    registry = Registry().add([OrderDesk, Helpdesk, SizedAnswerFlow])
    desk, helpdesk = registry.get("OrderDesk"), registry.get("Helpdesk")
    assert desk is not None and helpdesk is not None
    # A subclass of a ready workflow is not `answer` too, nor shown as its results are.
    assert registry.commands() == {"order": desk}
    assert not registry.workflows["SizedAnswerFlow"].shows_result
    assert desk.correctable == ("price", "delivery") and not desk.takes_notes
    assert helpdesk.takes_notes and not helpdesk.chat and helpdesk.command is None

    launch = launch_of_command(desk, {"item": "  tea  ", "count": 3})
    assert launch.args == [Order(item="  tea  ", count=3)]
    assert (launch.summary, launch.id_prefix) == ("order: tea", "order")
    with pytest.raises(Invalid, match="^--count: "):
        launch_of_command(desk, {"item": "tea", "count": "many"})

    check_changes(registry, "OrderDesk", {"price": "12 EUR"})
    with pytest.raises(Invalid, match=r"--set budget: not a fact of OrderDesk \(facts: price"):
        check_changes(registry, "OrderDesk", {"budget": "5"})


@workflow.defn
class OtherDesk(Recipe[Order, Order]):
    command = OrderDesk.command

    @workflow.run
    async def run(self, order: Order) -> Order:
        return await self.execute(order)


def test_two_recipes_cannot_declare_one_command() -> None:
    with pytest.raises(RegistrationError, match="command 'order' is declared twice"):
        Registry().add([OrderDesk, OtherDesk])
