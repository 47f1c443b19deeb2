"""Group filters: which sampled groups enter the update, as pure functions in one registry.

Every filter is ``fn(rewards [N], group_index [N], **params) -> keep [N] bool`` and keeps
or drops whole groups. Looked up by name through :func:`filter_groups`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from agentic_rl.algorithms.advantages import as_float, group_stats
from agentic_rl.algorithms.params import Fraction
from agentic_rl.algorithms.registry import Registry

GroupFilterFn = Callable[..., Tensor]
GROUP_FILTERS = Registry("group filter", inputs=2)
"""Name -> ``fn(rewards [N], group_index [N], **params) -> keep [N] bool``."""


def register_group_filter(name: str) -> Callable[[GroupFilterFn], GroupFilterFn]:
    """Decorator adding ``fn(rewards, group_index, **params) -> keep [N] bool`` to :data:`GROUP_FILTERS`."""
    return GROUP_FILTERS.register(name)


def filter_groups(name: str, rewards: Tensor, group_index: Tensor, **params) -> Tensor:
    """Run the filter ``name`` -> keep mask [N]; a parameter it does not take is a TypeError."""
    return GROUP_FILTERS.call(name, rewards, group_index, **params)


@register_group_filter("none")
def keep_all(rewards: Tensor, group_index: Tensor) -> Tensor:
    """Keep every group -> [N] bool."""
    return torch.ones(rewards.shape, dtype=torch.bool, device=rewards.device)


@register_group_filter("zero-variance")
def drop_zero_variance(rewards: Tensor, group_index: Tensor) -> Tensor:
    """DAPO dynamic sampling: drop groups whose rewards are all equal (all solved or all
    failed: zero group advantage, no gradient) -> keep [N] bool. A group of one is dropped."""
    _, std, _ = group_stats(as_float(rewards), group_index)
    return std > 0


@register_group_filter("top-std")
def keep_top_std(rewards: Tensor, group_index: Tensor, *, keep_fraction: Fraction = 0.25) -> Tensor:
    """StarPO-S (RAGEN): keep the ceil(keep_fraction * groups) groups with the highest
    reward standard deviation (ties: the group seen first wins) -> keep [N] bool."""
    if not 0.0 < keep_fraction <= 1.0:
        raise ValueError(f"keep_fraction must be in (0, 1], got {keep_fraction}")
    _, inverse = torch.unique(group_index, return_inverse=True)
    if inverse.numel() == 0:
        return torch.zeros(0, dtype=torch.bool)
    _, std, _ = group_stats(as_float(rewards), group_index)
    num_groups = int(inverse.max()) + 1
    group_std = torch.zeros(num_groups, dtype=std.dtype).scatter(0, inverse, std)
    first_seen = torch.full((num_groups,), inverse.numel(), dtype=torch.long).scatter_reduce(
        0, inverse, torch.arange(inverse.numel()), "amin"
    )
    # Sort by std descending, then by first appearance: a deterministic tie break.
    order = sorted(range(num_groups), key=lambda g: (-float(group_std[g]), int(first_seen[g])))
    kept = torch.zeros(num_groups, dtype=torch.bool)
    kept[order[: math.ceil(keep_fraction * num_groups)]] = True
    return kept[inverse]
