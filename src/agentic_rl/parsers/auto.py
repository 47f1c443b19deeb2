"""``parser: auto``: the tool-call format a model's chat template (or, failing that, its
special tokens) shows it was trained on."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agentic_rl.parsers.base import AUTO, PARSERS

__all__ = ["FORMAT_MARKERS", "detect_parser", "parser_for_tokenizer", "resolve_auto_parsers"]

FORMAT_MARKERS: tuple[tuple[str, str], ...] = (
    ("<function=", "qwen3_coder"),  # before hermes: Qwen3-Coder's template also writes <tool_call>
    ("tool\u2581calls\u2581begin", "deepseek_v3"),
    ("[TOOL_CALLS]", "mistral"),
    ("<|python_tag|>", "llama3_json"),
    ("<|start_header_id|>", "llama3_json"),
    ("<|channel|>", "harmony"),  # gpt-oss: every assistant message names its channel
    ("<|/tool|>", "phi4_mini"),  # Phi-4-mini declares tools in <|tool|>...<|/tool|>
    ("functools[", "phi4_mini"),
    ("<tool_call>", "hermes"),
    ("<start_of_turn>", "hermes"),  # Gemma: no call tokens, tools are prompted (hermes, as the project teaches)
)
"""(text in the template or a special token, the registered parser it means), first match
wins: the template is searched first, then the special tokens. A family without a native
call format (Gemma) maps to the prompted format the project pairs with it."""


def _choices() -> str:
    return ", ".join(sorted(PARSERS))


def detect_parser(template: str | dict | None, special_tokens: Iterable[str] = ()) -> str:
    """The registered parser name for a chat template (one string, or a dict of named
    templates) and the tokenizer's special tokens; ValueError (one line naming
    ``parser`` and the choices) when none of :data:`FORMAT_MARKERS` occurs."""
    sources = template.values() if isinstance(template, dict) else [template]
    text = "\n".join(source for source in sources if isinstance(source, str))
    tokens = "\n".join(token for token in special_tokens if isinstance(token, str))
    for haystack in (text, tokens):
        for marker, name in FORMAT_MARKERS:
            if marker in haystack:
                if name not in PARSERS:  # the markers name registered parsers only (tests check)
                    raise ValueError(f"parser: auto matched {marker!r} but no parser '{name}' is registered")
                return name
    looked = ", ".join(dict.fromkeys(marker for marker, _ in FORMAT_MARKERS))
    where = "chat template or special tokens" if text else "special tokens (it has no chat template)"
    raise ValueError(
        f"parser: auto found no known tool-call format in the model's {where} (looked for {looked}); "
        f"set parser to one of: {_choices()}"
    )


def _special_tokens(tokenizer: Any) -> list[str]:
    tokens = list(getattr(tokenizer, "all_special_tokens", None) or [])
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    tokens += [getattr(token, "content", str(token)) for token in added.values()]
    return tokens


def parser_for_tokenizer(tokenizer: Any) -> str:
    """:func:`detect_parser` for a Hugging Face tokenizer."""
    return detect_parser(getattr(tokenizer, "chat_template", None), _special_tokens(tokenizer))


def resolve_auto_parsers(option_sets: Iterable[dict[str, Any]], tokenizer: Any | Callable[[], Any]) -> str | None:
    """Replace ``parser: auto`` in place in each env options dict (and each entry of its
    ``mix``) with the format of ``tokenizer`` (or of what a zero-argument callable returns,
    called only when some option says auto). Returns the name chosen, None when no option
    said auto. ValueError when the template shows no known format."""
    targets: list[dict[str, Any]] = []
    for options in option_sets:
        if not isinstance(options, dict):
            continue
        entries = options.get("mix")
        targets += [options, *(entry for entry in entries or () if isinstance(entry, dict))]
    targets = [options for options in targets if options.get("parser") == AUTO]
    if not targets:
        return None
    if callable(tokenizer) and not hasattr(tokenizer, "chat_template"):
        tokenizer = tokenizer()
    name = parser_for_tokenizer(tokenizer)
    for options in targets:
        options["parser"] = name
    return name
