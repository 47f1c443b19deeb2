"""Rendering messages to tokens with the model's own chat template, token-in-token-out.

The prompt is tokenized once. After that, sampled tokens are kept exactly as sampled and
each observation is rendered once, as the text the chat template would put between the
end of the assistant's content and the start of the next assistant turn. History is
never re-tokenized, so the trained-on tokens are exactly the sampled ones.

Tools are described by the chat template itself (``apply_chat_template(..., tools=...)``)
when the template renders ``tools`` and the tool-call format is one a template's
description fits (``render_tools``); otherwise the parser's own prompt goes into the
system message, as for SmolLM2, whose template knows no tools.

Observation text (tool output, tool names, feedback) is untrusted: it is tokenized as
plain text, so a tool output containing ``<|im_end|>`` cannot end the turn or open a
fake assistant turn; only the template's own markup yields special tokens.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from agentic_rl.types import TOOL_OUTPUT_PROBE, Message, openai_tools

if TYPE_CHECKING:
    from agentic_rl.parsers.base import ToolCallParser

_PROBE = "\u2063PROBE\u2063"  # text that never occurs in a template, to locate content
_SLOT = re.compile("\u2063SLOT(\\d+)\u2063")  # stands in for one untrusted field while rendering
_UNTRUSTED_FIELDS = ("content", "name")  # names too: an unknown tool's name is the model's text
_TOOLS_VARIABLE = re.compile(r"\btools\b")


def template_renders_tools(tokenizer) -> bool:
    """Whether the tokenizer's chat template (any of them, when it has several) uses a
    ``tools`` variable, i.e. describes tools passed to ``apply_chat_template``."""
    template = getattr(tokenizer, "chat_template", None)
    sources = template.values() if isinstance(template, dict) else [template]
    return any(isinstance(source, str) and _TOOLS_VARIABLE.search(source) for source in sources)


class ChatRenderer:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("tokenizer has no chat template; multi-turn rollouts need one")
        self.template_tools = template_renders_tools(tokenizer)
        """The chat template describes tools passed to it (see ``render_tools``)."""
        self.stop_token_ids = self._stop_token_ids()
        specials = {token.content for token in getattr(tokenizer, "added_tokens_decoder", {}).values() if token.special}
        specials |= set(tokenizer.all_special_tokens)
        # Longest first, so a token that extends another one wins.
        self._special_pattern = re.compile(
            "(" + "|".join(map(re.escape, sorted(specials, key=len, reverse=True))) + ")"
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

    def _stop_token_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        for token in ("<|im_end|>", "<|eot_id|>", "<|end|>"):
            token_id = self.tokenizer.convert_tokens_to_ids(token)
            if isinstance(token_id, int) and token_id != self.tokenizer.unk_token_id:
                ids.add(token_id)
        return sorted(i for i in ids if i is not None)

    def render_tools(self, parser: ToolCallParser) -> bool:
        """Whether tools offered in ``parser``'s format are described by the chat template
        (``prompt_ids(..., tools=schemas)``) rather than by ``parser.format_tools_prompt``
        in the system message: the template renders tools and the format is one that a
        template's description fits (``parser.template_tools``)."""
        return self.template_tools and parser.template_tools

    def _render(self, messages: list[Message], *, add_generation_prompt: bool, tools: list[dict] | None = None) -> str:
        if tools:
            return self.tokenizer.apply_chat_template(
                messages, tools=openai_tools(tools), tokenize=False, add_generation_prompt=add_generation_prompt
            )
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    def encode_text(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt_ids(self, messages: list[Message], tools: list[dict] | None = None) -> list[int]:
        """Tokens of the opening conversation plus the assistant generation prompt.
        ``tools``: tool schemas (OpenAI's form, or bare functions) for the chat template to describe (only where
        ``template_tools``; otherwise they are in the messages' text already)."""
        if tools and not self.template_tools:
            raise ValueError(
                "this chat template does not render tools: describe them in the system message (parser.with_tools_prompt)"
            )
        return self.encode_text(self._render(messages, add_generation_prompt=True, tools=tools))

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
        if stopped:
            stop_texts = [self.tokenizer.decode([i]) for i in self.stop_token_ids]
            matched = next((s for s in stop_texts if remainder.startswith(s)), None)
            remainder = remainder[len(matched) :] if matched else remainder
        return remainder + after[len(before) :]

    def encode_untrusted(self, text: str) -> list[int]:
        """Tokens of text from outside the template: special-token strings stay text."""
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def observation_ids(self, observations: list[Message], *, stopped: bool) -> list[int]:
        """Tokens of :meth:`observation_text`, the observations' fields tokenized as text.

        The observations are rendered with a slot marker in place of each untrusted field;
        special tokens are taken only from the template text between the slots.
        """
        values: list[str] = []
        slotted: list[Message] = []
        for message in observations:
            message = dict(message)
            for key in _UNTRUSTED_FIELDS:
                if isinstance(message.get(key), str):
                    values.append(message[key])
                    message[key] = f"\u2063SLOT{len(values) - 1}\u2063"
            slotted.append(message)
        template_text = self.observation_text(slotted, stopped=stopped)
        rendered = self.observation_text(observations, stopped=stopped)
        # Templates may transform a field (Llama's "| trim"): find the form they insert.
        for transform in (lambda value: value, str.strip):
            if _SLOT.sub(lambda slot: transform(values[int(slot.group(1))]), template_text) == rendered:
                break
        else:
            raise ValueError(
                "the chat template transforms observation text beyond trimming; cannot keep it from producing special tokens"
            )
        # Cut only at the template's own special tokens and tokenize the text between them
        # (fields included) in one piece: benign observations get exactly the ids of
        # tokenizing the rendered text, and no special token can come from a field.
        ids: list[int] = []
        run = ""
        for index, piece in enumerate(_SLOT.split(template_text)):
            if index % 2:  # re.split with a group alternates template text and slot numbers
                run += transform(values[int(piece)])
                continue
            for part_index, part in enumerate(self._special_pattern.split(piece)):
                if part_index % 2:
                    ids += self.encode_untrusted(run) + [self.tokenizer.convert_tokens_to_ids(part)]
                    run = ""
                else:
                    run += part
        ids += self.encode_untrusted(run)
        return ids
