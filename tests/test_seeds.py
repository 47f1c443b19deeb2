"""Seed derivation: the pure-Python stream_seed is bit-identical to splitmix64 on int64
tensors (the sampler's mixer, which the rollout engine used before), and derive_seed keeps
each stage's original formula so earlier runs reproduce."""

from __future__ import annotations

import random

import pytest
import torch

from agentic_rl.engines import sampling
from agentic_rl.seeds import STREAMS, derive_seed, stream_seed


def _torch_stream_seed(*parts: int) -> int:
    value = torch.tensor(0, dtype=torch.long)
    for part in parts:
        value = sampling._splitmix64(value + int(part))
    return int(value)


def test_stream_seed_equals_the_int64_tensor_mixer() -> None:
    rng = random.Random(0)
    cases = [(0,), (1, 2), (2**62 - 1, 5), (-3, 7)] + [
        tuple(rng.getrandbits(62) for _ in range(rng.randint(1, 3))) for _ in range(500)
    ]
    for parts in cases:
        assert stream_seed(*parts) == _torch_stream_seed(*parts), parts
    assert stream_seed(0, 0) != stream_seed(0, 1)
    assert -(2**63) <= stream_seed(2**62, 3) < 2**63


def test_derive_seed_keeps_each_stage_formula() -> None:
    assert derive_seed(5, "run") == 5
    assert derive_seed(5, "rl-step", 3) == 5 * 100_003 + 3
    assert derive_seed(5, "rl-step", 3, round=2) == 5 * 100_003 + 3 + 2 * 1_000_003
    assert derive_seed(5, "filter") == 12 and derive_seed(5, "dpo-pairs") == 16
    assert derive_seed(5, "turn", 4) == 9
    assert derive_seed(5, "arpo-round", 2) == 5 + 2 * 7919
    assert derive_seed(5, "arpo-fill") == 5 + 104_729
    assert derive_seed(5, "async-rollouts") == 5 + 13
    assert set(STREAMS) == {
        "run",
        "rl-step",
        "filter",
        "dpo-pairs",
        "turn",
        "arpo-round",
        "arpo-fill",
        "async-rollouts",
    }
    with pytest.raises(ValueError, match="unknown seed stream 'rl_step'"):
        derive_seed(5, "rl_step")
