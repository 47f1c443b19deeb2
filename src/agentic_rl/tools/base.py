"""Typed tools: a Python function with type hints and a Google-style docstring becomes
a :class:`Tool` with a derived JSON schema, argument validation and a never-raising
``invoke``.

The schema format follows ``transformers.utils.get_json_schema`` (``"nullable": True``
for ``Optional``) so the same schemas go straight into chat templates.
"""

from __future__ import annotations

import inspect
import json
import re
import time
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Union, overload

from agentic_rl.types import ToolCall, ToolResult

__all__ = ["Tool", "ToolArgumentError", "tool"]


class ToolArgumentError(ValueError):
    """The arguments of a tool call do not match the tool's schema."""


# --------------------------------------------------------------------------- validation

_JSON_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    # bool is a subclass of int in Python, but JSON true is not a number.
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, (list, tuple)),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _json_type_name(value: Any) -> str:
    """The JSON type name of a Python value, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _short_repr(value: Any, limit: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_value(value: Any, schema: dict, path: str) -> str | None:
    """Return an error message if ``value`` (argument ``path``) does not match ``schema``."""
    where = f"argument '{path}'"
    if value is None and schema.get("nullable"):
        return None
    expected = schema.get("type")
    if expected is not None:
        allowed = expected if isinstance(expected, list) else [expected]
        if not any(_JSON_TYPE_CHECKS.get(t, lambda v: True)(value) for t in allowed):
            wanted = " or ".join(allowed) + (" or null" if schema.get("nullable") else "")
            return f"{where} must be {wanted}, got {_json_type_name(value)} ({_short_repr(value)})"
    if "enum" in schema:
        # Compare with types too: in Python True == 1 and 1 == 1.0.
        if not any(type(value) is type(option) and value == option for option in schema["enum"]):
            options = ", ".join(_short_repr(option) for option in schema["enum"])
            return f"{where} must be one of {options}; got {_short_repr(value)}"
    if "items" in schema and isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            error = _check_value(item, schema["items"], f"{path}[{index}]")
            if error:
                return error
    return None


# --------------------------------------------------------------------------- Tool


@dataclass
class Tool:
    """A callable tool with a JSON schema.

    ``parameters`` is a JSON schema of type ``"object"`` (``properties``, ``required``,
    ``additionalProperties``); ``fn`` is called with the validated arguments as keywords.
    Build one with the :func:`tool` decorator, or directly for hand-written schemas.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    _defaults: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Defaults come from the function signature, so hand-built Tools get them too.
        try:
            signature = inspect.signature(self.fn)
        except (TypeError, ValueError):  # builtins without a signature
            signature = None
        self._defaults = {
            name: param.default
            for name, param in (signature.parameters.items() if signature else ())
            if param.default is not inspect.Parameter.empty
        }

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check ``arguments`` against the schema; return them with defaults filled.

        Raises ToolArgumentError with a one-line message the model can act on.
        """
        if not isinstance(arguments, dict):
            raise ToolArgumentError(
                f"arguments of '{self.name}' must be a JSON object, got {_json_type_name(arguments)}"
            )
        properties: dict[str, dict] = self.parameters.get("properties", {})
        if not self.parameters.get("additionalProperties", False):
            for key in arguments:
                if key not in properties:
                    expected = ", ".join(properties) or "none"
                    raise ToolArgumentError(
                        f"unexpected argument '{key}' for '{self.name}'; expected arguments: {expected}"
                    )
        for key in self.parameters.get("required", []):
            if key not in arguments:
                kind = properties.get(key, {}).get("type", "value")
                raise ToolArgumentError(f"missing required argument '{key}' ({kind}) for '{self.name}'")
        for key, value in arguments.items():
            if key in properties:
                error = _check_value(value, properties[key], key)
                if error:
                    raise ToolArgumentError(error)
        filled = {k: v for k, v in self._defaults.items() if k in properties}
        filled.update(arguments)
        return filled

    def invoke(self, call: ToolCall) -> ToolResult:
        """Validate and run one call. Never raises: failures become ``ok=False`` results."""
        start = time.perf_counter()

        def result(content: str, ok: bool = True, malformed: bool = False) -> ToolResult:
            return ToolResult(
                name=call.name,
                content=content,
                ok=ok,
                call_id=call.id,
                latency_s=time.perf_counter() - start,
                malformed=malformed,
            )

        try:
            arguments = self.validate(call.arguments)
        except ToolArgumentError as error:
            return result(f"Error: {error}", ok=False, malformed=True)
        # SystemExit too: a tool calling sys.exit() must not stop the trainer.
        except (Exception, SystemExit) as error:
            return result(f"Error: {type(error).__name__}: {error}", ok=False)
        try:
            output = self.fn(**arguments)
            if isinstance(output, str):
                return result(output)
            return result(json.dumps(output, ensure_ascii=False, default=str))
        except (Exception, SystemExit) as error:
            return result(f"Error: {type(error).__name__}: {error}", ok=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


# --------------------------------------------------------------------------- @tool

_PRIMITIVE_SCHEMAS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    list: {"type": "array"},
    dict: {"type": "object"},
}


def _annotation_schema(annotation: Any) -> dict[str, Any]:
    """JSON schema of one type annotation; TypeError if it cannot be expressed."""
    if annotation in _PRIMITIVE_SCHEMAS:
        return dict(_PRIMITIVE_SCHEMAS[annotation])
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Union or origin is types.UnionType:
        members = [a for a in args if a is not type(None)]
        if len(members) == 1 and len(args) == 2:
            return {**_annotation_schema(members[0]), "nullable": True}
        raise TypeError(f"unsupported annotation {annotation!r}: use one type or Optional[T]")
    if origin is list:
        schema: dict[str, Any] = {"type": "array"}
        if args:
            schema["items"] = _annotation_schema(args[0])
        return schema
    if origin is dict:
        return {"type": "object"}
    if origin is Literal:
        kinds = {_json_type_name(a) for a in args}
        if not args or not kinds <= {"string", "integer", "number", "boolean"}:
            raise TypeError(f"unsupported Literal {annotation!r}: values must be str/int/float/bool")
        if kinds == {"integer", "number"}:
            kinds = {"number"}
        if len(kinds) > 1:
            raise TypeError(f"unsupported Literal {annotation!r}: mixed value types")
        return {"type": kinds.pop(), "enum": list(args)}
    raise TypeError(f"unsupported annotation {annotation!r}")


_SECTION_RE = re.compile(
    r"^(Args|Arguments|Parameters|Returns?|Raises|Yields?|Examples?|Notes?|"
    r"Attributes|See Also|Todo|Warnings?|References)\s*:\s*$"
)
_ARG_RE = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(\([^)]*\))?\s*:\s*(?P<desc>.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (summary, {parameter: description})."""
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION_RE.match(line.strip()):
            break
        summary.append(line.strip())

    descriptions: dict[str, str] = {}
    in_args, section_indent, entry_indent, current = False, 0, None, None
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        header = _SECTION_RE.match(stripped)
        if header and (not in_args or indent <= section_indent):
            in_args = header.group(1) in ("Args", "Arguments", "Parameters")
            section_indent, entry_indent, current = indent, None, None
            continue
        if not in_args or not stripped:
            continue
        if indent <= section_indent:  # dedent ends the section
            in_args = False
            continue
        match = _ARG_RE.match(stripped)
        # A deeper-indented "word: text" line continues the previous entry.
        if match and (entry_indent is None or indent <= entry_indent):
            entry_indent, current = indent, match.group("name")
            descriptions[current] = match.group("desc").strip()
        elif current is not None:
            descriptions[current] = f"{descriptions[current]} {stripped}".strip()
    return " ".join(summary), descriptions


def _tool_from_function(fn: Callable[..., Any], name: str | None, description: str | None) -> Tool:
    tool_name = name or fn.__name__
    summary, arg_docs = _parse_docstring(fn.__doc__ or "")
    description = description or summary
    if not description:
        raise TypeError(f"tool '{tool_name}': add a docstring (its first paragraph is the description)")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as error:  # unresolvable forward references
        raise TypeError(f"tool '{tool_name}': cannot resolve type hints: {error}") from error

    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        where = f"tool '{tool_name}', parameter '{param.name}'"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{where}: *args/**kwargs cannot be described by a JSON schema")
        if param.name not in hints:
            raise TypeError(f"{where}: missing type hint")
        if not arg_docs.get(param.name):
            raise TypeError(f"{where}: missing description in the docstring 'Args:' section")
        try:
            schema = _annotation_schema(hints[param.name])
        except TypeError as error:
            raise TypeError(f"{where}: {error}") from None
        properties[param.name] = {**schema, "description": arg_docs[param.name]}
        if param.default is inspect.Parameter.empty:
            required.append(param.name)

    parameters = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    result = Tool(name=tool_name, description=description, parameters=parameters, fn=fn)
    result.__doc__ = fn.__doc__  # help(tool) shows the function's docs
    return result


@overload
def tool(fn: Callable[..., Any], *, name: str | None = None, description: str | None = None) -> Tool: ...
@overload
def tool(
    fn: None = None, *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed, docstringed function into a :class:`Tool`.

    Usable as ``@tool`` or ``@tool(name=..., description=...)``. Every parameter needs a
    type hint and an entry in the docstring's ``Args:`` section (schemas must be complete
    for the model to use them); otherwise TypeError is raised at decoration time.
    """

    def wrap(function: Callable[..., Any]) -> Tool:
        return _tool_from_function(function, name=name, description=description)

    return wrap(fn) if fn is not None else wrap
