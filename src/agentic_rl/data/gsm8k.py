"""GSM8K calculator annotations -> multi-turn tool-use SFT conversations.

GSM8K's rationales mark each computation as ``<<expr=result>>`` followed by the result
in the text (``48/2 = <<48/2=24>>24 clips``). Each annotation becomes one assistant turn
that ends in a real tool call (``calculator`` with the expression, or ``python`` with
``print(expression)``), the tool's real output becomes the ``tool`` message, and the text
after the last annotation ends in the env's answer format (``<answer>N</answer>``). The
result is OpenAI messages with structured ``tool_calls``, the format ``collect`` writes
and ``training.sft`` trains on. (``envs.math_python.gsm8k_to_sft`` converts a whole file
with the ``gsm8k`` env's own tool and system prompt: this module knows no envs.)

Every expression is run through the real tool; where the tool's output does not equal
the annotated result (beyond the annotation's own rounding) or the tool fails, the
conversation is flagged in ``metadata["mismatches"]``; results are never copied from the
annotation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from agentic_rl.rewards import gold_answer, normalize_number
from agentic_rl.tools import Tool
from agentic_rl.types import Message, ToolCall

__all__ = ["Annotation", "ConversionStats", "convert_example", "convert_rows", "parse_rationale", "results_match"]

ANNOTATION = re.compile(r"<<([^<>]*)>>")
TOOLS = ("calculator", "python")


@dataclass(frozen=True)
class Annotation:
    """One ``<<expression=result>>`` and the rationale text before it."""

    text_before: str
    expression: str
    annotated: str | None
    """The result written in the annotation (None when it has no ``=``)."""


def parse_rationale(rationale: str) -> tuple[list[Annotation], str, str]:
    """Split a GSM8K answer into annotations, the closing text and the final answer.

    ``"a 48/2 = <<48/2=24>>24 b\\n#### 24"`` -> ``([Annotation("a 48/2 = ", "48/2", "24")],
    "24 b", "24")``: the text after an annotation (which restates the result) starts the
    next piece.
    """
    body, marker, _ = rationale.rpartition("####")
    if not marker:
        raise ValueError("no '#### <answer>' line in the rationale")
    annotations = []
    position = 0
    for match in ANNOTATION.finditer(body):
        expression, equals, result = match.group(1).rpartition("=")
        if not equals:
            expression, result = match.group(1), ""
        annotations.append(Annotation(body[position : match.start()], expression.strip(), result.strip() or None))
        position = match.end()
    return annotations, body[position:].strip(), gold_answer(rationale)


def _decimals(text: str) -> int:
    cleaned = text.strip().replace(",", "").replace("$", "")
    return len(cleaned.split(".", 1)[1]) if "." in cleaned else 0


def results_match(tool_output: str, annotated: str | None) -> bool:
    """True when the tool's output equals the annotated result (within float noise), or
    the annotation has decimals and is the output rounded to them (``3.33`` for 10/3).
    An integer annotation of a non-integer result (``<<10/3=3>>``) is a mismatch."""
    computed, expected = normalize_number(tool_output), normalize_number(annotated)
    if computed is None or expected is None:
        return False
    if abs(computed - expected) <= abs(expected) * Fraction(1, 10**9):
        return True
    decimals = _decimals(annotated or "")
    return decimals > 0 and "/" not in (annotated or "") and round(computed, decimals) == expected


def _call(tool_name: str, expression: str, call_id: str) -> ToolCall:
    arguments = {"expression": expression} if tool_name == "calculator" else {"code": f"print({expression})"}
    return ToolCall(name=tool_name, arguments=arguments, id=call_id)


def convert_example(
    question: str, rationale: str, tool: Tool, *, system_prompt: str = "", answer_tag: str = "answer"
) -> dict[str, Any]:
    """One GSM8K row as ``{"messages": [...], "metadata": {...}}``; ``tool`` (a calculator
    or python tool) really runs every annotated expression.

    A ``$`` right before an annotation moves to the next turn with the number it belongs
    to, so no turn ends in a dangling currency sign.
    """
    if tool.name not in TOOLS:
        raise ValueError(f"tool: expected one of {', '.join(TOOLS)}, got {tool.name!r}")
    annotations, closing, answer = parse_rationale(rationale)
    messages: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": question})
    mismatches: list[dict[str, Any]] = []
    carry = ""
    for index, annotation in enumerate(annotations):
        text = (carry + annotation.text_before).rstrip()
        carry = ""
        if text.endswith("$"):
            text, carry = text[:-1].rstrip(), "$"
        call = _call(tool.name, annotation.expression, f"call_{index}")
        result = tool.invoke(call)
        if not (result.ok and results_match(result.content, annotation.annotated)):
            mismatches.append(
                {
                    "expression": annotation.expression,
                    "annotated": annotation.annotated,
                    "tool_output": result.content,
                    "tool_ok": result.ok,
                }
            )
        function = {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}
        messages.append(
            {
                "role": "assistant",
                "content": text.lstrip("\n"),
                "tool_calls": [{"id": call.id, "type": "function", "function": function}],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": result.content})
    closing = (carry + closing).strip()
    final = f"<{answer_tag}>{answer}</{answer_tag}>"
    messages.append({"role": "assistant", "content": f"{closing}\n{final}" if closing else final})
    metadata = {"answer": answer, "tool": tool.name, "calls": len(annotations), "mismatches": mismatches}
    return {"messages": messages, "metadata": metadata}


@dataclass
class ConversionStats:
    """What ``convert_rows`` did."""

    rows: int = 0
    written: int = 0
    calls: int = 0
    flagged: int = 0
    """Conversations with at least one mismatch or failed tool call."""
    mismatched_calls: int = 0
    skipped: list[str] = field(default_factory=list)
    """One line per row that could not be converted (no ``####`` answer...)."""


def convert_rows(
    rows: Iterable[dict],
    tool: Tool,
    *,
    system_prompt: str = "",
    keep_mismatches: bool = False,
    stats: ConversionStats | None = None,
) -> Iterator[dict]:
    """Convert rows (``question`` / ``answer``), dropping flagged ones unless ``keep_mismatches``."""
    stats = stats if stats is not None else ConversionStats()
    for index, row in enumerate(rows):
        stats.rows += 1
        try:
            example = convert_example(str(row["question"]), str(row["answer"]), tool, system_prompt=system_prompt)
        except (KeyError, ValueError) as error:
            stats.skipped.append(f"row {index + 1}: {error}")
            continue
        example["metadata"]["source_index"] = index
        mismatches = example["metadata"]["mismatches"]
        stats.calls += example["metadata"]["calls"]
        stats.mismatched_calls += len(mismatches)
        stats.flagged += bool(mismatches)
        if mismatches and not keep_mismatches:
            continue
        stats.written += 1
        yield example
