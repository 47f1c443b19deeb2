"""Partial rollouts in the in-process engine: weights staged by another thread take over
between two decode steps, the sequence in flight continues with them, and its completion
records where the version changed (engines/staged.py)."""

from __future__ import annotations

import copy

import torch

from agentic_rl.chat import ChatRenderer
from agentic_rl.config import RolloutConfig
from agentic_rl.engines.base import SamplingParams
from agentic_rl.engines.hf import HFBackend
from agentic_rl.rollout.episode import Episode
from agentic_rl.types import Trajectory, TrajectoryGroup, Turn

TOKENS = 20
SWAP_AFTER = 5
"""Decode steps before the swap; the first step samples two tokens (the prompt's first
token as it is admitted, then one decode), so SWAP_AFTER + 1 tokens precede it."""
BEFORE = SWAP_AFTER + 1


def _decode(backend: HFBackend, prompt: list[int], *, stage=None) -> tuple:
    """One sequence to the end; ``stage()`` runs after SWAP_AFTER steps."""
    sampling = SamplingParams(temperature=1.0, max_new_tokens=TOKENS)
    finished = []
    with backend.session(sampling, stop_token_ids=[]) as session:
        session.submit(0, prompt, TOKENS, seed=7)
        steps = 0
        while session.busy:
            if steps == SWAP_AFTER and stage is not None:
                stage()
            finished += session.step()
            steps += 1
    return finished[0][1]


def _perturbed(model) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {name: p.detach() + 0.5 * torch.randn(p.shape, generator=generator) for name, p in model.named_parameters()}


def test_staged_weights_take_over_mid_turn(tiny) -> None:
    model, tokenizer = tiny
    prompt = tokenizer("Tell me something.")["input_ids"]
    old = _decode(HFBackend(copy.deepcopy(model), tokenizer), prompt)
    assert old.weight_version == 0 and not old.version_changes

    backend = HFBackend(copy.deepcopy(model), tokenizer)
    new = _perturbed(model)
    swapped = _decode(backend, prompt, stage=lambda: backend.stage_weights(new, 3))
    # Tokens before the swap were drawn by the old weights (same stream: same tokens), the rest by the new ones.
    assert swapped.weight_version == 0 and swapped.version_changes == [(BEFORE, 3)]
    assert swapped.token_ids[:BEFORE] == old.token_ids[:BEFORE]
    assert swapped.token_ids[BEFORE:] != old.token_ids[BEFORE:]
    assert len(swapped.token_ids) == TOKENS
    assert backend.weight_version == 3
    for name, parameter in backend.model.named_parameters():
        assert torch.equal(parameter, new[name])
    # The next turn is all new weights: no change recorded.
    fresh = _decode(backend, prompt)
    assert fresh.weight_version == 3 and not fresh.version_changes


def test_older_staged_version_is_ignored_and_apply_staged_loads_when_idle(tiny) -> None:
    model, tokenizer = tiny
    backend = HFBackend(copy.deepcopy(model), tokenizer)
    newer, older = _perturbed(model), {name: torch.zeros_like(p) for name, p in model.named_parameters()}
    backend.stage_weights(newer, 2)
    backend.stage_weights(older, 1)
    assert backend.apply_staged() == 2 and backend.weight_version == 2
    assert backend.apply_staged() is None
    name, parameter = next(iter(backend.model.named_parameters()))
    assert torch.equal(parameter, newer[name])


def test_turn_version_changes_are_trajectory_positions(tiny) -> None:
    """Episode.take_completion turns the completion's offsets into token positions, and the
    trajectory's versions include every version that sampled any of its tokens."""
    _, tokenizer = tiny
    from agentic_rl.engines.base import Completion

    renderer = ChatRenderer(tokenizer)
    trajectory = Trajectory(task_id="0", group_id="g")
    trajectory.append([1, 2, 3], 0)
    episode = Episode(trajectory, None, RolloutConfig(), renderer)
    turn, _ = episode.take_completion(
        Completion(
            token_ids=[5, 6, 7, 8],
            logprobs=[-1.0] * 4,
            finish_reason="length",
            weight_version=4,
            version_changes=[(2, 5)],
        )
    )
    assert turn.response_start == 3 and turn.version_changes == [(5, 5)]
    trajectory.turns.append(turn)
    assert trajectory.weight_versions == [4, 5]
    group = TrajectoryGroup(task_id="0", group_id="g", trajectories=[trajectory])
    assert group.trajectories[0].weight_versions == [4, 5]
    assert Turn("x").version_changes == []
