"""Every seed a run uses, derived from the run's one ``seed`` in one place.

``stream_seed`` mixes integers into a 64-bit stream seed (splitmix64, the same function the
token sampler's counter-based draws use), so streams for different trajectories never
overlap. ``derive_seed`` names each random stream a run draws from; the linear forms of the
stages are kept as they were first written so that runs made before this module existed
reproduce exactly (changing them changes every seeded run).
"""

from __future__ import annotations

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _splitmix64(x: int) -> int:  # splitmix64's finaliser on an unsigned 64-bit integer (wrapping arithmetic).
    x = (x + _GOLDEN) & _MASK
    x = ((x ^ (x >> 30)) * _MIX1) & _MASK
    x = ((x ^ (x >> 27)) * _MIX2) & _MASK
    return x ^ (x >> 31)


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def stream_seed(
    *parts: int,
) -> int:  # One signed int64 stream seed from integers (e.g. a rollout seed and a trajectory's index).
    value = 0
    for part in parts:
        value = _splitmix64((value + int(part)) & _MASK)
    return _signed(value)


# stream -> (multiplier of the run seed, offset, stride of the index)
_STREAMS: dict[str, tuple[int, int, int]] = {
    "run": (1, 0, 0),  # The run seed itself: held-out evaluations, cold-start collection.
    "rl-step": (
        100_003,
        0,
        1,
    ),  # RL step ``index`` (a resampling round adds ``round * 1_000_003`` through ``derive_seed``'s ``round``).
    "filter": (1, 7, 0),  # Difficulty filtering's rollouts.
    "dpo-pairs": (1, 11, 0),  # Preference-pair collection.
    "turn": (1, 0, 1),  # Per-turn batched generation: turn ``index`` of a rollout call.
    "arpo-round": (1, 0, 7919),  # ARPO branching round ``index`` (1, 2, ...).
    "arpo-fill": (1, 104_729, 0),
    "async-rollouts": (
        1,
        13,
        0,
    ),  # Async mode's stream of groups (one stream per group ordinal).  # ARPO's global samples that fill the budget left after branching.
}
STREAMS = tuple(_STREAMS)


def derive_seed(seed: int, stream: str, index: int = 0, *, round: int = 0) -> int:
    """The seed of random stream ``stream`` (one of :data:`STREAMS`) for run seed ``seed``."""
    if stream not in _STREAMS:
        raise ValueError(f"unknown seed stream {stream!r}; known: {', '.join(STREAMS)}")
    multiplier, offset, stride = _STREAMS[stream]
    return seed * multiplier + offset + stride * index + 1_000_003 * round
