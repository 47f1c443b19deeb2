"""Rendering messages to tokens with the model's own chat template, token-in-token-out.

The prompt is tokenized once. After that, sampled tokens are kept exactly as sampled and
each observation is rendered once, as the text the chat template would put between the
end of the assistant's content and the start of the next assistant turn. History is
never re-tokenized, so the trained-on tokens are exactly the sampled ones.

Tools are described by the chat template itself (``apply_chat_template(..., tools=...)``)
when the template renders ``tools`` and the tool-call format is one a template's
description fits (``render_tools``); otherwise the parser's own prompt goes into the
system message, as for SmolLM2, whose template knows no tools.

Message fields (tool output, tool names, feedback, the task's text, assistant history,
tool schemas) are untrusted: every path from messages to ids (``prompt_ids`` for first and
segment prompts, ``observation_ids`` for the turns after) tokenizes them as plain text,
so a tool output containing ``<|im_end|>`` cannot end the turn or open a fake assistant
turn; only the template's own markup yields special tokens. Loose text (an assistant
turn's content, a query) goes through ``encode_untrusted``.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentic_rl.types import TOOL_OUTPUT_PROBE, Message, openai_tools

if TYPE_CHECKING:
    from agentic_rl.parsers.base import ToolCallParser

_PROBE = "\u2063PROBE\u2063"  # text that never occurs in a template, to locate content
_TOOLS_VARIABLE = re.compile(r"\btools\b")
TURN_END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<|call|>", "<|return|>")
"""The families' end-of-message tokens (as one token where a vocabulary has them)."""


def template_tools_mode(tokenizer) -> str | None:
    """How the tokenizer's chat template (any of them, when it has several) describes tools:
    ``"argument"``: it reads a ``tools`` variable (``apply_chat_template(tools=...)``);
    ``"system"``: it reads a ``tools`` key of a message (Phi-4-mini's shipped template: a
    JSON string on the system message); None: it lists none. Read from the template's
    syntax tree, so comments and text that mention tools do not count."""
    template = getattr(tokenizer, "chat_template", None)
    sources = [s for s in (template.values() if isinstance(template, dict) else [template]) if isinstance(s, str)]
    modes = {_tools_mode(source) for source in sources}
    return "argument" if "argument" in modes else "system" if "system" in modes else None


def _tools_mode(source: str) -> str | None:
    import jinja2
    from jinja2 import meta, nodes

    try:
        tree = jinja2.Environment(extensions=["jinja2.ext.loopcontrols", "jinja2.ext.do"]).parse(source)
    except jinja2.TemplateSyntaxError:  # a tag plain Jinja lacks (e.g. transformers' {% generation %}): the text
        return "argument" if _TOOLS_VARIABLE.search(source) else None
    if "tools" in meta.find_undeclared_variables(tree):
        return "argument"
    keys = [node.arg.value for node in tree.find_all(nodes.Getitem) if isinstance(node.arg, nodes.Const)]
    keys += [node.attr for node in tree.find_all(nodes.Getattr)]
    return "system" if "tools" in keys else None


def with_system_tools(messages: list[Message], tools: list[dict]) -> list[Message]:
    """``messages`` with ``tools`` (their function schemas as one JSON list) on the system
    message, where templates like Phi-4-mini's read them (an empty system message first
    when there is none)."""
    functions = json.dumps([tool["function"] for tool in openai_tools(tools)], ensure_ascii=False)
    if messages and messages[0]["role"] == "system":
        return [{**messages[0], "tools": functions}, *messages[1:]]
    return [{"role": "system", "content": "", "tools": functions}, *messages]


class ChatRenderer:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("tokenizer has no chat template; multi-turn rollouts need one")
        self._closing = ""
        self.tools_mode = template_tools_mode(tokenizer)
        """How the template takes tools (:func:`template_tools_mode`): the renderer passes them so."""
        self.template_tools = self.tools_mode is not None
        """The chat template describes tools passed to it (see ``render_tools``)."""
        self._closing = self._closing_text()
        self.turn_end_token_ids = self._turn_end_token_ids()
        """Every token a template may end an assistant message with (see ``stop_token_ids``)."""
        self.stop_token_ids = self._stop_token_ids()
        """The tokens sampling stops at."""
        specials = {token.content for token in getattr(tokenizer, "added_tokens_decoder", {}).values() if token.special}
        specials |= set(tokenizer.all_special_tokens)
        # Longest first, so a token that extends another one wins (none at all: a pattern that never matches).
        self._special_pattern = re.compile(
            "(" + ("|".join(map(re.escape, sorted(specials, key=len, reverse=True))) or "(?!)") + ")"
        )
        # What the template writes after an assistant message's content (e.g. "<|im_end|>\n").
        probe = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _PROBE}]
        rendered = self._render(probe, add_generation_prompt=False)
        self.assistant_suffix = rendered[rendered.rindex(_PROBE) + len(_PROBE) :]
        self.tool_output_template = self._tool_output_template(rendered)
        """How the template renders a tool message whose content is TOOL_OUTPUT_PROBE, after
        an assistant turn ("" when it renders no tool messages): where it frames tool output
        itself (``frames_tool_output``), observations carry the bare output."""

    def _tool_output_template(self, before: str) -> str:
        probe = [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": _PROBE},
            {"role": "tool", "name": "tool", "content": TOOL_OUTPUT_PROBE},
        ]
        try:
            rendered = self._render(probe, add_generation_prompt=False)
        except Exception:  # a template that refuses tool messages (jinja raise_exception): it frames nothing
            return ""
        return rendered[len(before) :] if rendered.startswith(before) and TOOL_OUTPUT_PROBE in rendered else ""

    def frames_tool_output(self, parser: ToolCallParser) -> bool:
        """Whether the template frames tool output as ``parser`` would (``parser.framed_by``)."""
        return parser.framed_by(self.tool_output_template)

    def _turn_end_token_ids(self) -> list[int]:
        """The eos token and the tokens the families' templates end an assistant message
        with (Gemma's <end_of_turn>, Phi's and gpt-oss's <|end|>, gpt-oss's <|call|> /
        <|return|>), which a tokenizer's eos_token may not be."""
        ids = {self.tokenizer.eos_token_id, *map(self._token_id, TURN_END_TOKENS)}
        return sorted(i for i in ids if i is not None)

    def _stop_token_ids(self) -> list[int]:
        """Where sampling stops: every turn end, except harmony's <|end|> (a vocabulary with
        <|return|>), which closes one message of a turn that goes on (its analysis, then a
        call or the final answer) until <|call|> or <|return|>."""
        message_end = self._token_id("<|end|>") if self._token_id("<|return|>") is not None else None
        return [i for i in self.turn_end_token_ids if i != message_end]

    def end_of_turn_id(self, content: str | None = None) -> int:
        """The stop token that ends an assistant turn with ``content`` (None: any turn) as
        the model samples it: the one the template writes after that content
        (``<|im_end|>`` for SmolLM2; harmony's <|call|> after a call), or, where the template
        writes a turn end sampling does not stop at (harmony's <|end|>, which stands for a
        sampled <|return|> in history), the tokenizer's eos token."""
        suffix = self.assistant_suffix
        if content:
            probe = [{"role": "user", "content": "u"}, {"role": "assistant", "content": content}]
            rendered = self._render(probe, add_generation_prompt=False)
            if content in rendered:  # templates that rewrite the content keep the generic suffix
                suffix = rendered[rendered.rindex(content) + len(content) :]
        starts = [
            i for i in self.turn_end_token_ids if (text := self.tokenizer.decode([i])) and suffix.startswith(text)
        ]
        stop = next((i for i in starts if i in self.stop_token_ids), None)
        if stop is None and starts and self.tokenizer.eos_token_id in self.stop_token_ids:
            stop = self.tokenizer.eos_token_id
        if stop is not None:
            return stop
        raise ValueError(f"no stop token starts the template's end of assistant turn {suffix!r}")

    def _token_id(self, token: str) -> int | None:
        """The id of a token the vocabulary has as one token, else None."""
        token_id = self.tokenizer.convert_tokens_to_ids(token)
        return token_id if isinstance(token_id, int) and token_id != self.tokenizer.unk_token_id else None

    def render_tools(self, parser: ToolCallParser) -> bool:
        """Whether tools offered in ``parser``'s format are described by the chat template
        (``prompt_ids(..., tools=schemas)``) rather than by ``parser.format_tools_prompt``
        in the system message: the template renders tools and the format is one that a
        template's description fits (``parser.template_tools``)."""
        return self.template_tools and parser.template_tools

    def _render(self, messages: list[Message], *, add_generation_prompt: bool, tools: list[dict] | None = None) -> str:
        if tools and self.tools_mode == "system":
            messages, tools = with_system_tools(messages, tools), None
        if tools:
            text = self.tokenizer.apply_chat_template(
                messages, tools=openai_tools(tools), tokenize=False, add_generation_prompt=add_generation_prompt
            )
        else:
            text = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt
            )
        if self._closing and not add_generation_prompt and text.endswith(self._closing):
            text = text[: -len(self._closing)]
        return text

    def _closing_text(self) -> str:
        """What the template writes after the last message of a render without a generation
        prompt only, and not once more messages follow (Phi-4-mini's shipped template appends
        its eos_token): the end of a conversation, not of a turn, so renders leave it out."""
        eos = self.tokenizer.eos_token
        user = {"role": "user", "content": "u"}
        one = self._render([user], add_generation_prompt=False)
        two = self._render([user, {"role": "assistant", "content": "a"}], add_generation_prompt=False)
        closing = eos if eos and one.endswith(eos) and not two.startswith(one) else ""
        return closing if two.startswith(one[: len(one) - len(closing)]) else ""

    def encode_text(self, text: str) -> list[int]:
        """Tokens of template text (trusted: special-token strings become special tokens);
        untrusted text goes through :meth:`encode_untrusted`."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt_ids(self, messages: list[Message], tools: list[dict] | None = None) -> list[int]:
        """Tokens of the opening conversation plus the assistant generation prompt.
        ``tools``: tool schemas (OpenAI's form, or bare functions) for the chat template to describe (only where
        ``template_tools``; otherwise they are in the messages' text already)."""
        if tools and not self.template_tools:
            raise ValueError(
                "this chat template does not render tools: describe them in the system message (parser.with_tools_prompt)"
            )
        return self._encode_fields_as_text(
            lambda shown, schemas: self._render(shown, add_generation_prompt=True, tools=schemas), messages, tools
        )

    def prompt_text(self, messages: list[Message], tools: list[dict] | None = None) -> str:
        """The chat template's text of ``messages`` plus the generation prompt (what
        :meth:`prompt_ids` tokenizes; untrusted fields as they are)."""
        return self._render(messages, add_generation_prompt=True, tools=tools)

    def response_text(self, token_ids: list[int]) -> str:
        """The assistant content of sampled tokens (a trailing stop token is not content)."""
        if token_ids and token_ids[-1] in self.stop_token_ids:
            token_ids = token_ids[:-1]
        return self.tokenizer.decode(token_ids, skip_special_tokens=False)

    def observation_text(self, observations: list[Message], *, stopped: bool) -> str:
        """Text to append after an assistant turn: the end of that turn the model did not
        sample itself, the observation messages, and the next generation prompt.

        ``stopped``: whether the turn ended with a sampled stop token (else it was cut at
        the token limit and the whole end-of-turn suffix is added).
        """
        probe = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _PROBE}]
        before = self._render(probe, add_generation_prompt=False)
        after = self._render(probe + observations, add_generation_prompt=True)
        if not after.startswith(before):
            raise ValueError(
                "chat template renders earlier messages differently once more follow; cannot append observations"
            )
        remainder = self.assistant_suffix
        if (
            stopped
        ):  # the sampled stop token stands for the template's turn end (harmony: <|call|> or <|return|> for <|end|>)
            stop_texts = [self.tokenizer.decode([i]) for i in self.turn_end_token_ids]
            matched = next((s for s in stop_texts if remainder.startswith(s)), None)
            remainder = remainder[len(matched) :] if matched else remainder
        return remainder + after[len(before) :]

    def encode_untrusted(self, text: str) -> list[int]:
        """Tokens of text from outside the template: special-token strings stay text."""
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def observation_ids(self, observations: list[Message], *, stopped: bool) -> list[int]:
        """Tokens of :meth:`observation_text`, the observations' fields tokenized as text."""
        return self._encode_fields_as_text(
            lambda shown, _: self.observation_text(shown, stopped=stopped), observations, None
        )

    def _encode_fields_as_text(
        self, render: Callable[[list[Message], Any], str], messages: list[Message], tools: Any
    ) -> list[int]:
        """Tokens of ``render(messages, tools)`` where only the template's own markup yields
        special tokens: every special-token string in a field (any string value, nested ones
        included) is swapped for a marker before rendering, the rendered text is cut at the
        template's special tokens, and the text between them is tokenized in one piece with
        the markers put back as plain text. Fields without such strings: exactly the ids of
        tokenizing the rendered text. A template that transforms a field (``| trim``, a
        split) transforms the marker with it."""
        markers = _Markers(self._special_pattern)
        text = render(markers.swap(messages), markers.swap(tools))
        if not markers.found:
            return self.encode_text(text)
        ids: list[int] = []
        for index, part in enumerate(self._special_pattern.split(text)):
            if index % 2:  # re.split with a group alternates text and the special tokens between it
                ids.append(self.tokenizer.convert_tokens_to_ids(part))
            elif part:
                ids += self.encode_untrusted(markers.restore(part))
        return ids


class _Markers:
    """Special-token strings of untrusted values, each swapped for a marker of plain letters
    and digits (a random nonce: text cannot forge one) that survives rendering, ``tojson`` too."""

    def __init__(self, special_pattern: re.Pattern[str]) -> None:
        self.special_pattern = special_pattern
        self.nonce = secrets.token_hex(8)
        self.marker = re.compile(f"esc{self.nonce}n(\\d+)e")
        self.found: list[str] = []

    def _mark(self, match: re.Match[str]) -> str:
        self.found.append(match.group(0))
        return f"esc{self.nonce}n{len(self.found) - 1}e"

    def swap(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.special_pattern.sub(self._mark, value)
        if isinstance(value, dict):
            return {key: self.swap(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.swap(item) for item in value)
        return value

    def restore(self, text: str) -> str:
        return self.marker.sub(lambda match: self.found[int(match.group(1))], text)
