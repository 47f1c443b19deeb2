"""Weights handed to an engine by another thread while it decodes (partial rollouts).

A rollout worker receives the trainer's new weights while its episodes are mid-turn. The
receiving thread only *stages* them; the decoding thread applies them between two decode
steps (never inside a forward), so every sampled token comes from one whole set of
weights, and the sequences in flight continue with the new ones: their completions record
where the version changed (``Completion.version_changes``). The KV cache of the tokens
before the swap stays as the old weights computed it; the sampler log-probs recorded are
the probabilities the tokens were actually drawn with, which is what rollout correction
needs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any


class StagedWeights:
    """The newest staged ``(weights, version)``, applied once by ``apply()``.

    ``load(weights, version)`` does the copy into the engine's model (called by the
    decoding thread, outside any decode step)."""

    def __init__(self, load: Callable[[Mapping[str, Any], int], None]) -> None:
        self._load = load
        self._lock = threading.Lock()
        self._staged: tuple[Mapping[str, Any], int] | None = None

    def stage(self, weights: Mapping[str, Any], version: int) -> None:
        """Hold ``weights`` (full tensors by parameter name) as ``version``; an older version
        than one already staged is ignored."""
        with self._lock:
            if self._staged is None or version > self._staged[1]:
                self._staged = (weights, int(version))

    @property
    def pending(self) -> bool:
        """Whether weights wait to be applied (a lock-free read: cheap enough per decode step)."""
        return self._staged is not None

    def apply(self) -> int | None:
        """Load the staged weights, if any; returns their version (None: nothing staged)."""
        with self._lock:
            staged, self._staged = self._staged, None
        if staged is None:
            return None
        weights, version = staged
        self._load(weights, version)
        return version
