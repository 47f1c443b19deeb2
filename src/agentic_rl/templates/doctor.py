"""What ``agentic-rl doctor`` finds in a model's chat template and tokenizer: whether the
template is append-only across tool turns, which tool-call parser fits, whether it
describes tools and frames tool output itself, how it treats reasoning, and what a run
with it needs.

The append-only check renders a scripted three-turn tool conversation turn by turn (tool
calls in the fitting parser's format, reasoning where the template has it) and checks that
each prompt extends the previous prompt plus the turn the model sampled: what the rollout
appends is then what the template renders (``agentic_rl.templates.drift``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from agentic_rl.chat import ChatRenderer
from agentic_rl.parsers import get_parser, parser_for_tokenizer
from agentic_rl.parsers.base import ToolCallParser
from agentic_rl.templates.thinking import THINK_CLOSE, THINK_OPEN
from agentic_rl.types import Message, ToolCall, ToolResult

__all__ = ["TemplateReport", "inspect_template", "report_table"]

_REASONING = "I should look this up first."
_LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a fact up.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}


@dataclass
class TemplateReport:
    """The doctor's findings (see :func:`inspect_template`)."""

    has_template: bool
    parser: str | None = None
    parser_note: str = ""
    renders_tools: bool = False
    frames_tool_output: bool = False
    turn_end: str = ""
    reasoning: str | None = None
    """"open" (a turn opens ``<think>``), "prompt" (the generation prompt opens it), None."""
    reasoning_across_tools: bool = True
    """Earlier reasoning is still in the prompt after a tool turn."""
    reasoning_after_user: bool = True
    """Earlier reasoning is still in the prompt after a new user message."""
    divergence: str | None = None
    """None: append-only across tool turns; else where a prompt first stops extending the last."""
    divergence_without_reasoning: str | None = None
    needs: list[str] = field(default_factory=list)

    @property
    def append_only(self) -> bool:
        return self.divergence is None


def _reasoning_mode(renderer: ChatRenderer, template: str) -> str | None:
    opening = renderer.prompt_text([{"role": "user", "content": "u"}])
    if THINK_OPEN in opening[opening.rindex("u") :]:
        return "prompt"
    return "open" if THINK_OPEN in template or THINK_CLOSE in template else None


def _reply(parser: ToolCallParser, turn: int, reasoning: str | None) -> str:
    thought = {"open": f"{THINK_OPEN}\n{_REASONING}\n{THINK_CLOSE}\n\n", "prompt": f"{_REASONING}\n{THINK_CLOSE}\n\n"}
    answer = (
        parser.format_calls([ToolCall(name="lookup", arguments={"query": f"fact {turn}"})]) if turn < 2 else "Paris."
    )
    return thought.get(reasoning or "", "") + answer


def _difference(turn: int, grown: str, rendered: str) -> str:
    at = len(os.path.commonprefix([grown, rendered]))
    return (
        f"the prompt after tool turn {turn + 1} renders {rendered[max(0, at - 12) : at + 20]!r} "
        f"where the appended sequence has {grown[max(0, at - 12) : at + 20]!r}"
    )


def _conversation(renderer: ChatRenderer, parser: ToolCallParser, reasoning: str | None) -> str | None:
    """Where the scripted tool conversation's prompts stop growing by appending (None: never)."""
    in_template = renderer.render_tools(parser)
    framed = renderer.frames_tool_output(parser)
    messages: list[Message] = [
        {"role": "system", "content": "You answer questions."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    tools = [_LOOKUP] if in_template else None
    if not in_template:
        messages = parser.with_tools_prompt(messages, [_LOOKUP])
    prompt = renderer.prompt_text(messages, tools=tools)
    for turn in range(2):
        reply = _reply(parser, turn, reasoning)
        messages += [
            {"role": "assistant", "content": reply},
            parser.format_result(ToolResult(name="lookup", content=f"result {turn}"), framed=framed),
        ]
        rendered = renderer.prompt_text(messages, tools=tools)
        if not rendered.startswith(prompt + reply):
            return _difference(turn, prompt + reply, rendered)
        prompt = rendered
    return None


def _keeps_reasoning(renderer: ChatRenderer, reasoning: str, then: Message) -> bool:
    reply = _reply(get_parser("hermes"), 2, reasoning)
    messages = [{"role": "user", "content": "u"}, {"role": "assistant", "content": reply}, then]
    return _REASONING in renderer.prompt_text(messages)


def inspect_template(tokenizer) -> TemplateReport:
    """The doctor's findings for a Hugging Face tokenizer (its chat template included)."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return TemplateReport(has_template=False, needs=["a chat template: multi-turn rollouts render with it"])
    renderer = ChatRenderer(tokenizer)
    report = TemplateReport(has_template=True, turn_end=renderer.assistant_suffix)
    try:
        report.parser = parser_for_tokenizer(tokenizer)
    except ValueError:
        report.parser_note = "no known tool-call format in the template or special tokens"
    parser = get_parser(report.parser or "hermes")
    report.renders_tools = renderer.render_tools(parser)
    report.frames_tool_output = renderer.frames_tool_output(parser)
    source = "\n".join(template.values()) if isinstance(template, dict) else template
    report.reasoning = _reasoning_mode(renderer, source)
    if report.reasoning:
        tool = parser.format_result(ToolResult(name="lookup", content="r"), framed=report.frames_tool_output)
        report.reasoning_across_tools = _keeps_reasoning(renderer, report.reasoning, tool)
        report.reasoning_after_user = _keeps_reasoning(renderer, report.reasoning, {"role": "user", "content": "v"})
    report.divergence = _conversation(renderer, parser, report.reasoning)
    if report.divergence and report.reasoning == "open":  # the prompt-opened kind always drops the opening
        report.divergence_without_reasoning = _conversation(renderer, parser, None)
    report.needs = _needs(report)
    return report


def _needs(report: TemplateReport) -> list[str]:
    needs = [f"parser: {report.parser} (or auto)" if report.parser else "parser: set one (auto finds none)"]
    if report.reasoning:
        needs.append("rollout.thinking: " + ("keep" if report.reasoning_across_tools else "strip"))
    if report.divergence and (report.reasoning is None or report.divergence_without_reasoning):
        needs.append("expect template_drift_tokens > 0: each tool turn goes on in a new segment")
    if not report.renders_tools:
        needs.append("tools described by the parser's prompt in the system message (the template lists none)")
    return needs


def _reasoning_row(report: TemplateReport) -> str:
    if not report.reasoning:
        return "no"
    opened = "the turn opens <think>" if report.reasoning == "open" else "the generation prompt opens <think>"
    tools = "kept" if report.reasoning_across_tools else "dropped"
    user = "kept" if report.reasoning_after_user else "dropped"
    return f"yes ({opened}); earlier reasoning: {tools} across tool turns, {user} after a new user message"


def report_table(report: TemplateReport, model: str) -> str:
    """The doctor's table as text (Markdown: it reads in a terminal and renders in docs)."""
    rows = [("model", model), ("chat template", "yes" if report.has_template else "no")]
    if report.has_template:
        append = "yes" if report.append_only else f"no: {report.divergence}"
        rows += [
            ("tool-call parser", report.parser or f"none ({report.parser_note})"),
            ("renders tools", "yes" if report.renders_tools else "no"),
            ("frames tool output", "yes" if report.frames_tool_output else "no"),
            ("turn ends with", repr(report.turn_end)),
            ("reasoning", _reasoning_row(report)),
            ("append-only across tool turns", append),
        ]
    rows.append(("a run needs", "; ".join(report.needs)))
    width = max(len(name) for name, _ in rows)
    lines = [f"| {'check'.ljust(width)} | result |", f"|{'-' * (width + 2)}|--------|"]
    lines += [f"| {name.ljust(width)} | {value} |" for name, value in rows]
    return "\n".join(lines) + "\n"
