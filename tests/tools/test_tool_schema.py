"""@tool schema derivation, argument validation, invoke and the registry."""

from __future__ import annotations

from typing import Literal

import pytest

from agentic_rl.tools import BUILTIN_TOOLS, Tool, ToolArgumentError, ToolRegistry, calculator, get_tool, tool
from agentic_rl.types import ToolCall


@tool
def search(
    query: str,
    limit: int,
    threshold: float,
    exact: bool,
    ids: list[int],
    mode: Literal["fast", "slow"] = "fast",
    lang: str | None = None,
    page: int | None = 1,
) -> str:
    """Search the corpus for documents.

    This second paragraph is not part of the description.

    Args:
        query: The search query.
        limit (int): How many results
            to return at most.
        threshold: Minimum score.
        exact: Whether to match exactly.
        ids: Document ids to restrict to.
        mode: Search mode.
        lang: Language code, or null for any.
        page: Result page.

    Returns:
        The results as text.
    """
    return f"{query}|{limit}|{threshold}|{exact}|{ids}|{mode}|{lang}|{page}"


EXPECTED_PARAMETERS = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "The search query."},
        "limit": {"type": "integer", "description": "How many results to return at most."},
        "threshold": {"type": "number", "description": "Minimum score."},
        "exact": {"type": "boolean", "description": "Whether to match exactly."},
        "ids": {"type": "array", "items": {"type": "integer"}, "description": "Document ids to restrict to."},
        "mode": {"type": "string", "enum": ["fast", "slow"], "description": "Search mode."},
        "lang": {"type": "string", "nullable": True, "description": "Language code, or null for any."},
        "page": {"type": "integer", "nullable": True, "description": "Result page."},
    },
    "required": ["query", "limit", "threshold", "exact", "ids"],
    "additionalProperties": False,
}

VALID = {"query": "q", "limit": 3, "threshold": 0.5, "exact": False, "ids": [1, 2]}


# --------------------------------------------------------------------------- schema


def test_schema_is_derived_from_hints_and_docstring() -> None:
    assert isinstance(search, Tool)
    assert search.name == "search"
    assert search.description == "Search the corpus for documents."
    assert search.parameters == EXPECTED_PARAMETERS
    assert search.schema() == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the corpus for documents.",
            "parameters": EXPECTED_PARAMETERS,
        },
    }


def test_decorator_with_arguments_overrides_name_and_description() -> None:
    @tool(name="add_numbers", description="Add two numbers.")
    def add(a: int, b: float = 1.0) -> float:
        """Ignored summary.

        Args:
            a: First.
            b: Second.
        """
        return a + b

    assert add.name == "add_numbers"
    assert add.description == "Add two numbers."
    assert add.parameters["required"] == ["a"]
    assert add(2, b=3) == 5  # __call__ goes straight to the function


def test_multiline_summary_and_literal_types() -> None:
    @tool
    def pick(level: Literal[1, 2, 3], scale: Literal[1, 2.5], flag: Literal[True]) -> str:
        """Pick a level
        from a list.

        Args:
            level: The level.
            scale: The scale.
            flag: A flag.
        """
        return "ok"

    assert pick.description == "Pick a level from a list."
    props = pick.parameters["properties"]
    assert props["level"] == {"type": "integer", "enum": [1, 2, 3], "description": "The level."}
    assert props["scale"]["type"] == "number"
    assert props["flag"] == {"type": "boolean", "enum": [True], "description": "A flag."}


def test_no_parameters_and_dict_parameter() -> None:
    @tool
    def now() -> str:
        """Return the time."""
        return "noon"

    @tool
    def store(data: dict, tags: list) -> str:
        """Store data.

        Args:
            data: Any JSON object.
            tags: Any list.
        """
        return "stored"

    assert now.parameters == {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    assert store.parameters["properties"]["data"] == {"type": "object", "description": "Any JSON object."}
    assert store.parameters["properties"]["tags"] == {"type": "array", "description": "Any list."}


def test_missing_docstring_entry_raises_type_error() -> None:
    with pytest.raises(TypeError, match="parameter 'b'.*docstring"):

        @tool
        def f(a: int, b: int) -> int:
            """Add.

            Args:
                a: First.
            """
            return a + b


def test_missing_type_hint_raises_type_error() -> None:
    with pytest.raises(TypeError, match="parameter 'b'.*missing type hint"):

        @tool
        def f(a: int, b) -> int:  # type: ignore[no-untyped-def]
            """Add.

            Args:
                a: First.
                b: Second.
            """
            return a + b


def test_missing_docstring_raises_type_error() -> None:
    with pytest.raises(TypeError, match="docstring"):

        @tool
        def f(a: int) -> int:
            return a


@pytest.mark.parametrize("annotation", ["tuple[int, int]", "int | str", "set[int]", "object"])
def test_unsupported_annotation_raises_type_error(annotation: str) -> None:
    namespace: dict = {}
    exec(  # builds a function with the given annotation
        f'def f(a: {annotation}) -> str:\n    """Do.\n\n    Args:\n        a: A.\n    """\n    return \'\'\n',
        namespace,
    )
    with pytest.raises(TypeError, match="parameter 'a'"):
        tool(namespace["f"])


def test_var_args_rejected() -> None:
    with pytest.raises(TypeError, match=r"\*args"):

        @tool
        def f(*values: int) -> int:
            """Sum.

            Args:
                values: Values.
            """
            return sum(values)


# --------------------------------------------------------------------------- validate


def test_validate_fills_defaults() -> None:
    assert search.validate(dict(VALID)) == {**VALID, "mode": "fast", "lang": None, "page": 1}


def test_validate_accepts_int_for_float_and_none_for_optional() -> None:
    args = search.validate({**VALID, "threshold": 1, "lang": None, "page": None, "mode": "slow"})
    assert args["threshold"] == 1 and args["lang"] is None and args["page"] is None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({k: v for k, v in VALID.items() if k != "limit"}, "missing required argument 'limit' (integer)"),
        ({**VALID, "limit": True}, "argument 'limit' must be integer, got boolean (true)"),
        ({**VALID, "limit": "3"}, "argument 'limit' must be integer, got string (\"3\")"),
        ({**VALID, "limit": 3.0}, "argument 'limit' must be integer, got number (3.0)"),
        ({**VALID, "threshold": False}, "argument 'threshold' must be number, got boolean"),
        ({**VALID, "exact": 1}, "argument 'exact' must be boolean, got integer (1)"),
        ({**VALID, "query": None}, "argument 'query' must be string, got null"),
        ({**VALID, "ids": "1,2"}, "argument 'ids' must be array, got string"),
        ({**VALID, "ids": [1, "2"]}, "argument 'ids[1]' must be integer, got string"),
        ({**VALID, "mode": "medium"}, 'argument \'mode\' must be one of "fast", "slow"; got "medium"'),
        ({**VALID, "page": "2"}, "argument 'page' must be integer or null, got string"),
        ({**VALID, "color": "red"}, "unexpected argument 'color' for 'search'; expected arguments: query, limit"),
    ],
)
def test_validate_errors(arguments: dict, message: str) -> None:
    with pytest.raises(ToolArgumentError) as info:
        search.validate(arguments)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("arguments", [[1, 2], "q", None, 3])
def test_validate_rejects_non_dict(arguments: object) -> None:
    with pytest.raises(ToolArgumentError, match="must be a JSON object"):
        search.validate(arguments)  # type: ignore[arg-type]


def test_tool_argument_error_is_value_error() -> None:
    assert issubclass(ToolArgumentError, ValueError)


def test_enum_is_type_strict() -> None:
    @tool
    def level(n: Literal[1, 2]) -> str:
        """Set a level.

        Args:
            n: The level.
        """
        return str(n)

    with pytest.raises(ToolArgumentError, match="must be integer"):
        level.validate({"n": True})  # True == 1 in Python, but is not a valid level
    with pytest.raises(ToolArgumentError, match="must be one of 1, 2"):
        level.validate({"n": 3})


# --------------------------------------------------------------------------- invoke


def test_invoke_success_returns_string_and_metadata() -> None:
    result = search.invoke(ToolCall(name="search", arguments=dict(VALID), id="call_7"))
    assert result.ok and not result.malformed
    assert result.content == "q|3|0.5|False|[1, 2]|fast|None|1"
    assert result.name == "search" and result.call_id == "call_7"
    assert result.latency_s >= 0.0


def test_invoke_json_dumps_non_string_results() -> None:
    @tool
    def stats(values: list[float]) -> dict:
        """Summary statistics.

        Args:
            values: The numbers.
        """
        return {"n": len(values), "total": sum(values)}

    result = stats.invoke(ToolCall(name="stats", arguments={"values": [1, 2.5]}))
    assert result.ok and result.content == '{"n": 2, "total": 3.5}'


def test_invoke_bad_arguments_is_malformed_and_never_raises() -> None:
    for arguments in ({}, {**VALID, "limit": True}, {**VALID, "x": 1}, ["not", "a", "dict"]):
        result = search.invoke(ToolCall(name="search", arguments=arguments, id="c"))  # type: ignore[arg-type]
        assert not result.ok and result.malformed
        assert result.content.startswith("Error: ")
        assert result.call_id == "c"


def test_invoke_tool_exception_is_not_malformed() -> None:
    @tool
    def explode(message: str) -> str:
        """Always fail.

        Args:
            message: The error message.
        """
        raise RuntimeError(message)

    result = explode.invoke(ToolCall(name="explode", arguments={"message": "boom"}, id="x"))
    assert not result.ok and not result.malformed
    assert result.content == "Error: RuntimeError: boom"


def test_invoke_survives_system_exit() -> None:
    import sys

    @tool
    def quit_now() -> str:
        """Exit the process."""
        sys.exit(3)

    result = quit_now.invoke(ToolCall(name="quit_now", arguments={}))
    assert not result.ok and result.content == "Error: SystemExit: 3"


def test_hand_built_tool() -> None:
    def shout(text: str, times: int = 2) -> str:
        return text.upper() * times

    shout_tool = Tool(
        name="shout",
        description="Shout.",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string"}, "times": {"type": "integer"}},
            "required": ["text"],
            "additionalProperties": False,
        },
        fn=shout,
    )
    assert shout_tool.validate({"text": "a"}) == {"text": "a", "times": 2}
    assert shout_tool.invoke(ToolCall(name="shout", arguments={"text": "a"})).content == "AA"


# --------------------------------------------------------------------------- registry


def test_registry_basics() -> None:
    registry = ToolRegistry([calculator, search])
    assert registry.names() == ["calculator", "search"]
    assert len(registry) == 2
    assert "search" in registry and "missing" not in registry
    assert registry.get("search") is search
    assert [t.name for t in registry] == ["calculator", "search"]
    assert registry.schemas() == [calculator.schema(), search.schema()]


def test_registry_rejects_duplicates() -> None:
    registry = ToolRegistry([calculator])
    with pytest.raises(ValueError, match="already registered"):
        registry.register(calculator)


def test_registry_get_unknown_lists_names() -> None:
    with pytest.raises(KeyError, match="available tools: calculator, search"):
        ToolRegistry([calculator, search]).get("nope")


def test_registry_invoke() -> None:
    registry = ToolRegistry([calculator, search])
    ok = registry.invoke(ToolCall(name="calculator", arguments={"expression": "2+3"}, id="call_0"))
    assert ok.ok and ok.content == "5" and ok.call_id == "call_0"

    unknown = registry.invoke(ToolCall(name="browser", arguments={}, id="call_1"))
    assert not unknown.ok and unknown.malformed
    assert unknown.content == "Error: unknown tool 'browser'; available tools: calculator, search"
    assert unknown.name == "browser" and unknown.call_id == "call_1" and unknown.unknown_tool

    bad_args = registry.invoke(ToolCall(name="calculator", arguments={"expr": "1"}))
    assert not bad_args.ok and bad_args.malformed and not bad_args.unknown_tool


def test_empty_registry_invoke() -> None:
    result = ToolRegistry().invoke(ToolCall(name="x", arguments={}))
    assert result.content == "Error: unknown tool 'x'; available tools: none"


def test_builtin_tools() -> None:
    assert BUILTIN_TOOLS["calculator"] is calculator
    assert get_tool("calculator") is calculator
    with pytest.raises(KeyError, match="available: calculator"):
        get_tool("nope")
