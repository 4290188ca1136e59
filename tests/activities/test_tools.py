"""Tools: `@tool` gives a model the schema of a typed function and runs it with the
arguments the model wrote; every mistake the model can fix comes back as a failed
`ToolResult` it can read, a transient failure is retried by Temporal, and the
built-in calculator evaluates arithmetic without `eval`, within its limits."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field
from temporalio import workflow
from temporalio.common import RetryPolicy

from durafact._core.tools import (
    BoundCall,
    SkippedTool,
    ToolCall,
    ToolListRequest,
    ToolRequest,
    ToolResult,
    ToolSpec,
)

# The workflow sandbox re-imports this module (CallOneTool); the rest is not workflow code.
with workflow.unsafe.imports_passed_through():
    import pytest
    from temporalio.client import Client
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from durafact._activities.calculator import (
        EXPRESSION,
        MAX_DIGITS,
        MAX_EXPONENT,
        MAX_LENGTH,
        MAX_NESTING,
        CalculatorError,
        calculator,
        evaluate,
    )
    from durafact._activities.tools import (
        InvalidArguments,
        Tool,
        ToolActivities,
        ToolCatalog,
        ToolProvider,
        ToolUnavailable,
        UnknownTool,
        tool,
    )
    from durafact._runtime.registry import builtin_registry
    from durafact._runtime.settings import Settings
    from durafact._runtime.worker import build_worker


# --- tools a user writes -----------------------------------------------------------------


class Address(BaseModel):
    city: str
    street: str = ""


class Booking(BaseModel):
    """A table at a restaurant."""

    restaurant: str
    guests: int = Field(ge=1, le=12)


@tool
async def forecast(
    city: Annotated[str, Field(description="The city, as people write it")],
    days: int = 1,
) -> dict[str, Any]:
    """The weather forecast for a city.

    Longer text that the model does not need.
    """
    return {"city": city, "days": days, "sky": "clear"}


bookings: dict[str, Booking] = {}


@tool(name="book_table", destructive=True)
def book(booking: Booking, idempotency_key: str) -> Booking:
    """Book a table."""
    bookings.setdefault(idempotency_key, booking)  # once per key, however often retried
    return booking


@tool
def ship(to: Address, express: bool = False) -> str:
    return f"to {to.city} {'express' if express else 'standard'}"


@tool
def fails(reason: str) -> str:
    """Always raises."""
    raise LookupError(f"no record of {reason}")


attempts: Counter[str] = Counter()


@tool
async def flaky(text: str, idempotency_key: str) -> str:
    """Down on its first attempt for each call."""
    attempts[idempotency_key] += 1
    if attempts[idempotency_key] == 1:
        raise ToolUnavailable("the service is restarting", retry_after=timedelta(seconds=0.2))
    return f"{text} (attempt {attempts[idempotency_key]}, key {idempotency_key})"


@tool
def slow(seconds: float) -> str:
    """Blocks its thread, as a sync client would."""
    time.sleep(seconds)
    return "done"


TOOLS = [forecast, book, ship, fails, flaky, slow, calculator]


def call(name: str, arguments: dict[str, Any] | str, key: str = "wf:call-1") -> ToolRequest:
    return ToolRequest(
        call=ToolCall(id="call-1", name=name, arguments=arguments), idempotency_key=key
    )


async def call_tool(
    request: ToolRequest, catalog: ToolCatalog | None = None, env: ActivityEnvironment | None = None
) -> ToolResult:
    activities = ToolActivities(catalog or ToolCatalog(TOOLS))
    return await (env or ActivityEnvironment()).run(activities.call_tool, request)


# --- the decorator -----------------------------------------------------------------------


def test_a_typed_function_becomes_a_tool_with_the_json_schema_of_its_arguments() -> None:
    assert isinstance(forecast, Tool)
    assert forecast.spec == ToolSpec(
        name="forecast",
        description="The weather forecast for a city.",
        parameters={
            "type": "object",
            "properties": {
                "city": {
                    "type": "string",
                    "title": "City",
                    "description": "The city, as people write it",
                },
                "days": {"type": "integer", "title": "Days", "default": 1},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
        destructive=False,
    )
    # Still the function it was, for code that calls it directly.
    assert forecast.__doc__ is not None and forecast.__doc__.startswith("The weather")


def test_one_pydantic_parameter_is_the_arguments_object_and_the_key_is_never_shown() -> None:
    assert book.spec.name == "book_table"
    assert book.spec.destructive is True
    assert book.spec.description == "Book a table."
    assert book.spec.parameters == Booking.model_json_schema()
    assert "idempotency_key" not in str(book.spec.parameters)
    # Nested models are part of the schema of ordinary parameters.
    assert ship.spec.parameters["properties"]["to"] == {"$ref": "#/$defs/Address"}
    assert set(ship.spec.parameters["$defs"]) == {"Address"}
    assert ship.spec.description == ""


def test_signature_mistakes_fail_when_the_tool_is_defined() -> None:
    def untyped(x, y: int) -> int:  # type: ignore[no-untyped-def]
        return y

    def star(*args: int) -> int:
        return 0

    def fine(x: int) -> int:
        return x

    with pytest.raises(TypeError, match="parameter 'x' has no type annotation"):
        tool(untyped)
    with pytest.raises(TypeError, match="parameter 'args' must be an ordinary named parameter"):
        tool(star)
    with pytest.raises(ValueError, match="use letters, digits, _ and -"):
        tool(name="has space")(fine)
    with pytest.raises(ValueError, match="kept for MCP tools"):
        tool(name="server__fine")(fine)


async def test_arguments_are_validated_and_results_become_text() -> None:
    assert await forecast.run({"city": "Gdańsk", "days": "3"}) == (
        '{"city":"Gdańsk","days":3,"sky":"clear"}'
    )
    assert await ship.run({"to": {"city": "Toruń"}, "express": True}) == "to Toruń express"
    assert await book.run({"restaurant": "Pod Aniołami", "guests": 2}, "k") == (
        '{"restaurant":"Pod Aniołami","guests":2}'
    )
    with pytest.raises(InvalidArguments) as raised:
        await forecast.run({"days": "two", "hours": 3})
    assert str(raised.value) == (
        "city: Field required; "
        "days: Input should be a valid integer, unable to parse string as an integer "
        "(got 'two'); hours: not an argument of this tool"
    )


# --- the call_tool activity: what the model reads ---------------------------------------


async def test_a_call_runs_the_tool_and_the_idempotency_key_reaches_it() -> None:
    key = f"wf-{uuid.uuid4().hex[:6]}:call-1"
    result = await call_tool(call("book_table", {"restaurant": "Bar", "guests": 4}, key))
    assert result == ToolResult(
        call_id="call-1", name="book_table", ok=True, content='{"restaurant":"Bar","guests":4}'
    )
    assert bookings[key] == Booking(restaurant="Bar", guests=4)


async def test_an_unknown_tool_is_an_observation_naming_the_valid_ones() -> None:
    result = await call_tool(call("weather", {"city": "Gdańsk"}))
    assert not result.ok
    assert result.error_type == "UnknownTool"
    assert result.content == (
        "'weather' is not a valid tool, try one of [book_table, calculator, fails, flaky, "
        "forecast, ship, slow]"
    )


@pytest.mark.parametrize(
    ("arguments", "content"),
    [
        ("[1, 2]", "the arguments must be a JSON object, not '[1, 2]'"),
        ('{"city": ', "the arguments must be a JSON object, not '{\"city\": '"),
        ({"city": "Gdańsk", "days": "two"}, "days: Input should be a valid integer"),
        ({"days": 2}, "city: Field required"),
        ({"city": "Gdańsk", "when": "today"}, "when: not an argument of this tool"),
    ],
)
async def test_arguments_that_do_not_validate_say_which_field_and_why(
    arguments: dict[str, Any] | str, content: str
) -> None:
    result = await call_tool(call("forecast", arguments))
    assert (result.ok, result.error_type) == (False, "InvalidArguments")
    assert result.content.startswith("invalid arguments for forecast: ")
    assert content in result.content


async def test_json_text_is_an_arguments_object_and_plain_text_fits_a_single_string() -> None:
    assert (await call_tool(call("forecast", '{"city": "Gdańsk"}'))).ok
    result = await call_tool(call("calculator", "(2 + 3) * 4"))
    assert (result.ok, result.content) == (True, "20")
    # Plain text only stands for an argument when there is exactly one, a string.
    result = await call_tool(call("slow", "0.1"))
    assert result.error_type == "InvalidArguments"


async def test_a_tool_that_raises_is_an_observation_with_its_type_and_message() -> None:
    result = await call_tool(call("fails", {"reason": "order 7"}))
    assert result == ToolResult(
        call_id="call-1",
        name="fails",
        ok=False,
        content="LookupError: no record of order 7",
        error_type="ToolError",
    )
    result = await call_tool(call("calculator", {"expression": "1/0"}))
    assert (result.error_type, result.content) == ("ToolError", "CalculatorError: division by zero")


async def test_tool_unavailable_is_a_retryable_activity_failure() -> None:
    with pytest.raises(ApplicationError) as raised:
        await call_tool(call("flaky", {"text": "hi"}, key=f"k-{uuid.uuid4().hex}"))
    error = raised.value
    assert error.type == "ToolUnavailable"
    assert error.non_retryable is False
    assert error.next_retry_delay == timedelta(seconds=0.2)
    assert error.message == "tool flaky is unavailable: the service is restarting"


async def test_the_activity_heartbeats_while_a_slow_tool_runs() -> None:
    env = ActivityEnvironment()
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    result = await call_tool(call("slow", {"seconds": 2.4}), env=env)
    assert result.ok and result.content == "done"
    assert len(beats) >= 1


@workflow.defn
class CallOneTool:
    @workflow.run
    async def run(self, tool_call: ToolCall) -> ToolResult:
        return await workflow.execute_activity(
            "call_tool",
            ToolRequest(
                call=tool_call, idempotency_key=f"{workflow.info().workflow_id}:{tool_call.id}"
            ),
            result_type=ToolResult,
            start_to_close_timeout=timedelta(seconds=30),
            heartbeat_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=5), maximum_attempts=3),
        )


async def test_a_worker_retries_an_unavailable_tool_with_the_same_idempotency_key(
    client: Client, settings: Settings
) -> None:
    workflow_id = f"tool-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, settings, workflows=[CallOneTool], tools=[flaky]):
        started = time.monotonic()
        result = await client.execute_workflow(
            CallOneTool.run,
            ToolCall(id="c1", name="flaky", arguments={"text": "hello"}),
            id=workflow_id,
            task_queue=settings.task_queue,
        )
    assert result.ok
    assert result.content == f"hello (attempt 2, key {workflow_id}:c1)"
    # The tool's retry_after (0.2 s), not the policy's 5 s interval, set the wait.
    assert time.monotonic() - started < 4


# --- the catalog: Python tools and providers ---------------------------------------------


class Notes:
    """A tool provider keeping notes in memory, as an MCP server would behind a wire."""

    def __init__(self) -> None:
        self.notes: dict[str, str] = {}
        self.down = False
        self.skipped: list[SkippedTool] = []

    async def specs(self) -> list[ToolSpec]:
        if self.down:
            raise ToolUnavailable("notes server is not answering")
        return [
            ToolSpec(
                name="add",
                description="Keep a note.",
                parameters={
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
            ),
            ToolSpec(name="clear", description="Forget every note.", destructive=True),
        ]

    async def call(self, name: str, arguments: dict[str, Any], idempotency_key: str) -> str:
        if name == "add":
            if not isinstance(arguments.get("text"), str):
                raise InvalidArguments("text: a string is required")
            self.notes.setdefault(idempotency_key, arguments["text"])
            return f"{len(self.notes)} notes"
        if name == "clear":
            self.notes.clear()
            return "cleared"
        raise UnknownTool(name)


@pytest.fixture
def notes() -> Notes:
    return Notes()


@pytest.fixture
def catalog(notes: Notes) -> ToolCatalog:
    return ToolCatalog([calculator, forecast], providers={"notes": notes})


async def test_names_resolve_to_python_tools_provider_tools_and_whole_providers(
    catalog: ToolCatalog, notes: Notes
) -> None:
    assert isinstance(notes, ToolProvider)
    specs = await catalog.specs(["calculator", "notes"])
    assert [s.name for s in specs] == ["calculator", "notes__add", "notes__clear"]
    assert specs[2].destructive is True
    assert specs[1].parameters["required"] == ["text"]
    # Each once, in the order named.
    specs = await catalog.specs(["notes__clear", "forecast", "notes", "forecast"])
    assert [s.name for s in specs] == ["notes__clear", "forecast", "notes__add"]


async def test_unknown_names_fail_the_listing_naming_what_the_worker_has(
    catalog: ToolCatalog,
) -> None:
    with pytest.raises(ApplicationError) as raised:
        await catalog.specs(["calculator", "weather", "notes__delete", "files"])
    assert raised.value.type == "UnknownTool"
    assert raised.value.non_retryable is True
    assert raised.value.message == (
        "unknown tools 'weather', 'notes__delete', 'files': this worker has "
        "[calculator, forecast, notes__add, notes__clear]"
    )


async def test_the_list_tools_activity_lists_tools_and_whole_servers(
    catalog: ToolCatalog,
) -> None:
    activities = ToolActivities(catalog)
    env = ActivityEnvironment()
    listing = await env.run(
        activities.list_tools, ToolListRequest(tools=["forecast"], mcp_servers=["notes"])
    )
    assert [s.name for s in listing.specs] == ["forecast", "notes__add", "notes__clear"]
    assert listing.skipped == []
    with pytest.raises(ApplicationError) as raised:
        await env.run(activities.list_tools, ToolListRequest(mcp_servers=["calculator"]))
    assert raised.value.non_retryable is True
    assert raised.value.message.startswith("unknown MCP server 'calculator': this worker has notes")


async def test_provider_calls_get_arguments_and_key_and_report_like_python_tools(
    catalog: ToolCatalog, notes: Notes
) -> None:
    result = await call_tool(call("notes__add", {"text": "buy milk"}, key="wf:7"), catalog)
    assert (result.ok, result.name, result.content) == (True, "notes__add", "1 notes")
    # The same key again is a retry of the same call: the provider did it once.
    await call_tool(call("notes__add", {"text": "buy milk"}, key="wf:7"), catalog)
    assert notes.notes == {"wf:7": "buy milk"}
    # Plain text fits the provider's one string parameter, read from its schema.
    assert (await call_tool(call("notes__add", "call mum", key="wf:8"), catalog)).ok
    assert notes.notes["wf:8"] == "call mum"

    invalid = await call_tool(call("notes__add", {"text": 5}), catalog)
    assert (invalid.error_type, invalid.content) == (
        "InvalidArguments",
        "invalid arguments for notes__add: text: a string is required",
    )
    unknown = await call_tool(call("notes__delete", {}), catalog)
    assert unknown.error_type == "UnknownTool"
    assert unknown.content == (
        "'notes__delete' is not a valid tool, try one of "
        "[calculator, forecast, notes__add, notes__clear]"
    )
    notes.down = True
    with pytest.raises(ApplicationError) as raised:
        await catalog.specs(["notes"])
    assert (raised.value.type, raised.value.non_retryable) == ("ToolUnavailable", False)


# --- binding: the arguments a policy judges are those the tool receives -------------------


async def bind(name: str, arguments: dict[str, Any] | str, catalog: ToolCatalog) -> BoundCall:
    activities = ToolActivities(catalog)
    called = ToolCall(id="call-1", name=name, arguments=arguments)
    return await ActivityEnvironment().run(activities.bind_tool_call, called)


async def test_binding_gives_the_values_the_tool_receives_as_json(catalog: ToolCatalog) -> None:
    """Coerced by the tool's model, defaults filled in, text bound to the one string
    parameter, nested models as objects: what a rule and a person judge."""
    bound = ToolCatalog([forecast, ship, book, calculator])
    assert (await bind("forecast", {"city": "Kraków", "days": "3"}, bound)).arguments == {
        "city": "Kraków",
        "days": 3,
    }
    assert (await bind("forecast", {"city": "Oslo"}, bound)).arguments == {
        "city": "Oslo",
        "days": 1,
    }
    assert (await bind("calculator", "2 + 2", bound)).arguments == {"expression": "2 + 2"}
    assert (await bind("ship", {"to": {"city": "Rome"}, "express": "yes"}, bound)).arguments == {
        "to": {"city": "Rome", "street": ""},
        "express": True,
    }
    assert (await bind("book_table", {"restaurant": "Zazie", "guests": "2"}, bound)).arguments == {
        "restaurant": "Zazie",
        "guests": 2,
    }
    # A provider's tool is checked against its input schema, which coerces nothing.
    assert (await bind("notes__add", {"text": "milk"}, catalog)).arguments == {"text": "milk"}
    assert (await bind("notes__add", "call mum", catalog)).arguments == {"text": "call mum"}


async def test_arguments_that_do_not_bind_say_why_and_name_no_values(catalog: ToolCatalog) -> None:
    refused = await bind("forecast", {"city": "Oslo", "days": "many"}, catalog)
    assert (refused.arguments, refused.error_type) == (None, "InvalidArguments")
    assert refused.error == (
        "invalid arguments for forecast: days: Input should be a valid integer, unable to parse "
        "string as an integer (got 'many')"
    )
    schema = await bind("notes__add", {"text": 5}, catalog)
    assert (schema.error_type, schema.error) == (
        "InvalidArguments",
        "invalid arguments for notes__add: text: 5 is not of type 'string'",
    )
    unknown = await bind("notes__delete", {}, catalog)
    assert (unknown.arguments, unknown.error_type) == (None, "UnknownTool")
    assert (await bind("weather", {}, catalog)).error_type == "UnknownTool"
    # No JSON holds infinity as a number: the value would be judged as null.
    endless = await bind("slow", {"seconds": "inf"}, ToolCatalog([slow]))
    assert endless.error_type == "InvalidArguments"
    assert "do not stay the same as JSON" in endless.error


@tool
def shout(text: Annotated[str, AfterValidator(lambda text: text + "!")]) -> str:
    """Says it louder each time it is validated."""
    SHOUTED.append(text)
    return text


SHOUTED: list[str] = []


async def test_a_tool_whose_model_changes_what_was_judged_never_runs() -> None:
    """Validating again would change the values: `bind` refuses them, and a call
    marked bound that would run other values than its own is refused unrun."""
    catalog = ToolCatalog([shout])
    refused = await bind("shout", {"text": "hi"}, catalog)
    assert refused.error_type == "InvalidArguments"
    request = call("shout", {"text": "hi!"}).model_copy(update={"bound": True})
    result = await call_tool(request, catalog)
    assert (result.ok, result.error_type) == (False, "InvalidArguments")
    assert "what would run is not what was judged" in result.content
    assert SHOUTED == []
    # Unbound, nothing judged it: it runs as its model says.
    assert (await call_tool(call("shout", {"text": "hi"}), catalog)).content == "hi!"


def test_names_that_would_be_ambiguous_are_refused_when_the_catalog_is_built() -> None:
    with pytest.raises(ValueError, match="not '__'"):
        ToolCatalog(providers={"my__server": Notes()})
    with pytest.raises(ValueError, match="names both a Python tool and a tool provider"):
        ToolCatalog([calculator], providers={"calculator": Notes()})
    with pytest.raises(TypeError, match="has no specs"):
        ToolCatalog(providers={"x": object()})  # type: ignore[dict-item]


def test_the_worker_registers_the_calculator_as_a_built_in_tool() -> None:
    assert builtin_registry().tools["calculator"] is calculator


# --- the calculator ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("0.1 + 0.2", "0.3"),
        ("7 / 2", "3.5"),
        ("1 / 3", "0.3333333333333333333333333333"),
        ("1 / 3 * 3", "1"),
        ("2 ** 10", "1024"),
        ("2 ** -2", "0.25"),
        ("2 ** 0.5", "1.414213562373095048801688724"),
        ("-2 ** 2", "-4"),
        ("(-2) ** 2", "4"),
        ("-7 // 2", "-4"),
        ("-7 % 3", "2"),
        ("7 % -3", "-2"),
        ("7.5 % 2", "1.5"),
        ("+-+3", "-3"),
        ("1e3 + 1_000", "2000"),
        ("12345678901234567890 * 98765432109876543210", "1219326311370217952237463801111263526900"),
        ("  3 ", "3"),
    ],
)
def test_the_calculator_evaluates_arithmetic_exactly(expression: str, value: str) -> None:
    assert calculator(expression) == value


def test_the_calculator_computes_in_decimal() -> None:
    assert evaluate("0.1 * 3") == Decimal("0.3")


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("1 / 0", "division by zero"),
        ("5 // (2 - 2)", "division by zero"),
        ("5 % 0.0", "division by zero"),
        ("0 ** -1", "division by zero (0 to a negative power)"),
        ("(-8) ** 0.5", "a negative number to a fractional power is not a real number"),
        ("", "the expression is empty"),
        ("2 +", "not an arithmetic expression (invalid syntax): use numbers with "),
        ("x + 1", "name 'x' is not supported"),
        ("abs(-1)", "function call 'abs(-1)' is not supported"),
        ("__import__('os').system('true')", "function call"),
        ("(1).real", "attribute '(1).real' is not supported"),
        ("1 < 2", "comparison '1 < 2' is not supported"),
        ("'12' * 3", "\"'12'\" is not a number"),
        ("True + 1", "'True' is not a number"),
        ("2j", "'2j' is not a number"),
        ("1 if 1 else 2", "expression '1 if 1 else 2' is not supported"),
    ],
)
def test_the_calculator_refuses_what_is_not_arithmetic_saying_why(
    expression: str, error: str
) -> None:
    with pytest.raises(CalculatorError) as raised:
        evaluate(expression)
    assert str(raised.value).startswith(error)


def test_the_calculator_limits_length_nesting_exponents_and_magnitude() -> None:
    assert evaluate("1" + " + 1" * ((MAX_LENGTH - 1) // 4)) > 0
    with pytest.raises(CalculatorError, match=r"too long \(301 characters, at most 300\)"):
        evaluate("1" * (MAX_LENGTH + 1))

    assert evaluate("(" * MAX_NESTING + "1" + ")" * MAX_NESTING) == 1
    with pytest.raises(CalculatorError, match=f"more than {MAX_NESTING} levels"):
        evaluate("(" * (MAX_NESTING + 1) + "1" + ")" * (MAX_NESTING + 1))

    assert evaluate(f"1 ** {MAX_EXPONENT}") == 1
    with pytest.raises(CalculatorError, match=f"exponent {MAX_EXPONENT + 1} is too large"):
        evaluate(f"1 ** {MAX_EXPONENT + 1}")
    with pytest.raises(CalculatorError, match="exponent 387420489 is too large"):
        evaluate("9 ** 9 ** 9")

    assert len(calculator(f"10 ** {MAX_DIGITS - 1}")) == MAX_DIGITS
    for too_large in (f"10 ** {MAX_DIGITS}", "2 ** 999", "1e400", "1e60 * 1e60", "9" * 101):
        with pytest.raises(CalculatorError, match=rf"too large \(at most 10\*\*{MAX_DIGITS}\)"):
            evaluate(too_large)
    with pytest.raises(CalculatorError, match="cannot be computed within the limits"):
        evaluate("1e99 // 1e-50")


def test_the_calculators_schema_says_what_an_expression_is() -> None:
    expression = calculator.spec.parameters["properties"]["expression"]
    assert (expression["pattern"], expression["maxLength"]) == (EXPRESSION, MAX_LENGTH)
    # The worker validates arguments against the same schema before the calculator runs.
    assert calculator.validate({"expression": "(12.5 + 7) * 3 / 2 ** 4"})
    for wrong in ("17 times 23", "abs(-1)", "2 +", "1e3", "007"):
        with pytest.raises(InvalidArguments, match="expression: String should match pattern"):
            calculator.validate({"expression": wrong})
