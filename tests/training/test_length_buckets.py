"""Micro-batch bucketing: padded tokens plus a per-pass overhead, minimised exactly."""

from __future__ import annotations

import itertools
import random

from agentic_rl.training.batch import keyed_length_buckets, length_buckets


def _cost(lengths, buckets, overhead):
    return sum(max(lengths[i] for i in b) * len(b) + overhead for b in buckets)


def _brute_force(lengths, max_tokens, max_sequences, overhead):
    """Every split of the sorted order into contiguous runs."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    best = None
    for cuts in itertools.product([False, True], repeat=len(order) - 1):
        buckets, current = [], [order[0]]
        for index, cut in zip(order[1:], cuts):
            if cut:
                buckets.append(current)
                current = []
            current.append(index)
        buckets.append(current)
        if any(
            len(b) > 1 and (len(b) > max_sequences or max(lengths[i] for i in b) * len(b) > max_tokens) for b in buckets
        ):
            continue
        cost = _cost(lengths, buckets, overhead)
        best = cost if best is None else min(best, cost)
    return best


def test_hand_example():
    # Two long rows would pad six short ones by 190 tokens each: split (cost 60+6*10 + 2*200+60).
    lengths = [10, 200, 10, 10, 10, 195, 10, 10]
    buckets = length_buckets(lengths, 10_000, 16, overhead_tokens=60)
    assert buckets == [[0, 2, 3, 4, 6, 7], [5, 1]]
    # Close lengths stay in one pass.
    assert length_buckets([100, 104, 98, 101], 10_000, 16, overhead_tokens=60) == [[2, 0, 3, 1]]


def test_limits_hold_and_every_index_appears_once():
    random.seed(1)
    lengths = [random.randint(5, 300) for _ in range(50)]
    buckets = length_buckets(lengths, 1200, 6)
    assert sorted(i for b in buckets for i in b) == list(range(50))
    for b in buckets:
        assert len(b) <= 6 and max(lengths[i] for i in b) * len(b) <= 1200
    assert length_buckets([5000, 3], 1000, 4) == [[1], [0]]  # too long alone: own bucket
    assert length_buckets([], 100, 4) == []


def test_optimal_against_brute_force():
    rng = random.Random(0)
    for _ in range(40):
        lengths = [rng.randint(1, 120) for _ in range(rng.randint(1, 9))]
        max_tokens, max_sequences, overhead = rng.randint(100, 600), rng.randint(1, 5), rng.randint(0, 80)
        buckets = length_buckets(lengths, max_tokens, max_sequences, overhead_tokens=overhead)
        assert _cost(lengths, buckets, overhead) == _brute_force(lengths, max_tokens, max_sequences, overhead)


def test_keyed_buckets_never_mix_keys_and_match_the_plain_split_for_one_key() -> None:
    lengths = [10, 300, 12, 290, 11, 305]
    assert keyed_length_buckets([None] * 6, lengths, 1024, 6) == [(None, b) for b in length_buckets(lengths, 1024, 6)]
    keys = ["a", "b", "a", "b", "a", "b"]
    keyed = keyed_length_buckets(keys, lengths, 1024, 6)
    assert [key for key, _ in keyed] == ["a", "b"]  # keys in first-seen order
    assert all({keys[i] for i in bucket} == {key} for key, bucket in keyed)
    assert sorted(i for _, bucket in keyed for i in bucket) == list(range(6))


def test_bf16_mixed_weighs_a_micro_batch_more_than_fp32():
    from agentic_rl.training.batch import micro_batch_overhead

    assert micro_batch_overhead("fp32") == 64
    assert micro_batch_overhead("bf16-mixed") == 192
    assert micro_batch_overhead("something else") == 64
    # Two short rows among long ones: worth their own micro-batch at fp32's cost
    # (2 x 117 + 64 < 2 x 182 padded), not at bf16-mixed's (2 x 117 + 192 > 2 x 182).
    lengths = [62, 117] + [182] * 14
    assert len(length_buckets(lengths, 10_000, 16, overhead_tokens=micro_batch_overhead("fp32"))) == 2
    assert len(length_buckets(lengths, 10_000, 16, overhead_tokens=micro_batch_overhead("bf16-mixed"))) == 1
