"""``SamplingParams.top_logprobs``: the in-process engine returns, per sampled token, the k
most likely tokens of the distribution the token's log-prob comes from (a direct forward
pass agrees), and sampling without it holds nothing extra."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.engines.base import SamplingParams
from agentic_rl.engines.hf import HFBackend
from agentic_rl.engines.sampling import sample, top_logprobs

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_alternatives_match_a_forward_pass(tiny, temperature) -> None:
    model, tokenizer = tiny
    backend = HFBackend(model, tokenizer)
    prompts = [
        tokenizer("Hello there, how are", add_special_tokens=False)["input_ids"],
        tokenizer("Hi", add_special_tokens=False)["input_ids"],
    ]
    completions = backend.generate(
        prompts,
        SamplingParams(temperature=temperature, top_p=0.9, max_new_tokens=6, seed=1, top_logprobs=4),
        stop_token_ids=[2],
    )
    for prompt, completion in zip(prompts, completions):
        ids = prompt + completion.token_ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, len(prompt) - 1 : -1].float()
        reference = torch.log_softmax(logits / (temperature or 1.0), -1)
        assert len(completion.top_logprobs) == len(completion.token_ids)
        for position, (token, logprob, alternatives) in enumerate(
            zip(completion.token_ids, completion.logprobs, completion.top_logprobs)
        ):
            values, indices = reference[position].topk(4)
            assert [t for t, _ in alternatives] == indices.tolist()
            assert [v for _, v in alternatives] == pytest.approx(values.tolist(), abs=1e-4)
            assert alternatives[0][1] >= logprob  # exactly, not within a tolerance
            if temperature == 0:
                assert alternatives[0] == (token, logprob)


def test_the_top_entry_bounds_the_sampled_log_prob_exactly() -> None:
    """Same computation as the sampled token's log-prob: never below it, equal when it is the top token."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 1000, generator=generator) * 3
    seeds, positions = torch.arange(64), torch.zeros(64, dtype=torch.long)
    for temperature in (0.0, 0.5, 1.0, 1.5):
        tokens, logprobs = sample(logits, temperature=temperature, top_p=1.0, seeds=seeds, positions=positions)
        ids, values = top_logprobs(logits, temperature=temperature, k=5)
        assert bool((values[:, 0] >= logprobs).all())
        top = ids[:, 0] == tokens
        assert bool((values[top, 0] == logprobs[top]).all()) and (temperature > 0 or bool(top.all()))
    assert top_logprobs(logits[:, :3], temperature=1.0, k=20)[0].shape == (64, 3)  # k capped at the vocabulary


def test_without_top_logprobs_nothing_is_computed_or_held(tiny) -> None:
    model, tokenizer = tiny
    backend = HFBackend(model, tokenizer)
    with backend.session(SamplingParams(max_new_tokens=3), stop_token_ids=[2]) as session:
        session.submit(0, [1, 2, 3], 3, seed=0)
        while session.busy:
            finished = session.step()
        assert session.outputs.top_ids is None
    assert finished[0][1].top_logprobs is None
