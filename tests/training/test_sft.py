"""Supervised fine-tuning on the tiny random model (real tokenizer and chat template)."""

from __future__ import annotations

import copy

import pytest
import torch

from agentic_rl.chat import ChatRenderer
from agentic_rl.config import SFTConfig
from agentic_rl.data import render_example, trajectory_to_example
from agentic_rl.envs.arithmetic import DEFAULT_SYSTEM_PROMPT, ArithmeticTasks, demonstration
from agentic_rl.parsers import HermesParser
from agentic_rl.training.sft import tokenize_examples, train_sft
from agentic_rl.types import Trajectory

PARSER = HermesParser()


def arithmetic_examples(n: int) -> list[dict]:
    """Solved arithmetic conversations with a calculator call, as stored SFT examples."""
    examples = []
    for task in ArithmeticTasks(split="train", digits=2)[:n]:
        messages = [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, *demonstration(task, "tool", PARSER)]
        trajectory = Trajectory(task_id=task.id, group_id="g", messages=messages, reward=1.0)
        examples.append(trajectory_to_example(trajectory, PARSER))
    return examples


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def model(tiny):
    return copy.deepcopy(tiny[0])  # training mutates weights; keep the session model pristine


def test_examples_have_structured_calls():
    example = arithmetic_examples(1)[0]
    roles = [m["role"] for m in example["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert example["messages"][2]["tool_calls"][0]["function"]["name"] == "calculator"


def test_loss_decreases(model, tokenizer):
    # lr 1e-2: at 1e-3 the tiny random model needs ~60 steps to halve its loss.
    config = SFTConfig(epochs=20, lr=1e-2, batch_size=4, warmup_steps=0)
    steps = []
    result = train_sft(model, tokenizer, arithmetic_examples(4), config, on_step=steps.append)
    assert result.steps == 20 and len(result.losses) == 20
    assert result.losses[-1] < 0.5 * result.losses[0]
    assert set(steps[0]) >= {"step", "loss", "lr", "grad_norm", "tokens"}
    assert [s["step"] for s in steps] == list(range(1, 21))
    assert result.tokens == sum(s["tokens"] for s in steps) and result.tokens > 0
    assert not model.training


def test_loss_is_mean_nll_of_assistant_tokens(model, tokenizer):
    examples = arithmetic_examples(3)
    sequences, _ = tokenize_examples(examples, tokenizer, PARSER, max_length=4096)
    fresh = copy.deepcopy(model)
    nll, count = 0.0, 0
    with torch.no_grad():
        for ids, mask in sequences:
            logits = fresh(torch.tensor([ids])).logits[0].float()
            logprobs = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
            selected = torch.tensor(mask[1:], dtype=torch.bool)
            nll -= logprobs[selected].sum().item()
            count += int(selected.sum())
    result = train_sft(model, tokenizer, examples, SFTConfig(epochs=1, batch_size=8, lr=1e-4))
    assert result.steps == 1
    assert result.losses[0] == pytest.approx(nll / count, rel=1e-4)


def test_gradient_accumulation_is_exact(tiny, tokenizer):
    examples = arithmetic_examples(4)
    runs = []
    for micro_batch_tokens in (64, 8192):  # one sequence per micro-batch vs all in one
        model = copy.deepcopy(tiny[0])
        config = SFTConfig(epochs=2, lr=1e-3, batch_size=4, warmup_steps=0, micro_batch_tokens=micro_batch_tokens)
        runs.append((train_sft(model, tokenizer, examples, config).losses, model.lm_head.weight.detach().clone()))
    assert runs[0][0] == pytest.approx(runs[1][0], rel=1e-4)
    assert torch.allclose(runs[0][1], runs[1][1], atol=1e-5)


def test_mask_covers_only_assistant_turns(tokenizer):
    example = arithmetic_examples(1)[0]
    ids, mask = render_example(example["messages"], ChatRenderer(tokenizer), PARSER)
    trained = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    assert trained.startswith("<tool_call>") and trained.endswith("</answer><|im_end|>")
    assert "<tool_response>" not in trained and "What is" not in trained


def test_too_long_examples_are_dropped(model, tokenizer):
    examples = arithmetic_examples(3)
    lengths = sorted(len(ids) for ids, _ in tokenize_examples(examples, tokenizer, PARSER, max_length=4096)[0])
    examples.append(
        {
            "messages": examples[0]["messages"]
            + [{"role": "user", "content": "more " * 300}, {"role": "assistant", "content": "ok"}]
        }
    )
    sequences, dropped = tokenize_examples(examples, tokenizer, PARSER, max_length=lengths[-1])
    assert (len(sequences), dropped) == (3, 1)
    result = train_sft(model, tokenizer, examples, SFTConfig(epochs=1, max_length=lengths[-1]))
    assert (result.examples, result.dropped_too_long) == (3, 1)
    with pytest.raises(
        ValueError, match="^max_length: all 4 of the 4 SFT conversations are longer than 16 tokens; raise it$"
    ):
        train_sft(model, tokenizer, examples, SFTConfig(max_length=16))


def test_invalid_example_fails_before_training(model, tokenizer):
    examples = arithmetic_examples(2) + [{"messages": [{"role": "user", "content": "hi"}]}]
    with pytest.raises(ValueError, match="example 2: no assistant message"):
        train_sft(model, tokenizer, examples, SFTConfig())


def test_same_seed_same_losses(tiny, tokenizer):
    examples = arithmetic_examples(5)
    config = SFTConfig(epochs=2, lr=1e-3, batch_size=2, warmup_steps=1, seed=7)
    first = train_sft(copy.deepcopy(tiny[0]), tokenizer, examples, config).losses
    second = train_sft(copy.deepcopy(tiny[0]), tokenizer, examples, config).losses
    assert first == second and len(first) == 6
    other = train_sft(copy.deepcopy(tiny[0]), tokenizer, examples, config.model_copy(update={"seed": 8})).losses
    assert other != first
