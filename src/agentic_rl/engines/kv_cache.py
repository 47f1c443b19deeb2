"""A preallocated, slot-based KV cache that plugs into transformers' attention.

Keys and values of every layer live in two tensors ``[layers, slots, kv_heads, capacity,
head_dim]``. A slot holds one sequence; a forward pass runs over a contiguous range of
slots and writes each row's new keys at that row's own positions, so rows of different
lengths decode together without padding their caches and nothing is concatenated per
step. The model's attention calls ``update`` and gets back a view over the first
``width`` positions of those slots; the caller passes the matching boolean mask.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache


class SlotCache(Cache):
    """KV storage for ``slots`` sequences of up to ``capacity`` tokens (both can grow)."""

    def __init__(self, config, *, slots: int, capacity: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__(layers=[])
        self.num_layers = config.num_hidden_layers
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.dtype, self.device = dtype, device
        self.keys = self._empty(slots, capacity)
        self.values = self._empty(slots, capacity)
        # Set by ``bind`` before each forward pass.
        self._index: torch.Tensor | None = None
        self._width = 0
        self._flat: tuple[torch.Tensor, torch.Tensor] | None = None
        self._windows: tuple[torch.Tensor, torch.Tensor] | None = None

    def _empty(self, slots: int, capacity: int) -> torch.Tensor:
        return torch.zeros(
            (self.num_layers, slots, self.kv_heads, capacity, self.head_dim), dtype=self.dtype, device=self.device
        )

    @property
    def slots(self) -> int:
        return self.keys.shape[1]

    @property
    def capacity(self) -> int:
        return self.keys.shape[3]

    def reserve(self, slots: int, capacity: int) -> None:
        """Grow to at least ``slots`` x ``capacity`` (doubling, so growth is rare); keeps contents."""
        if slots <= self.slots and capacity <= self.capacity:
            return
        new_slots = max(slots, self.slots if slots <= self.slots else 2 * self.slots)
        new_capacity = max(capacity, self.capacity if capacity <= self.capacity else 2 * self.capacity)
        for name in ("keys", "values"):
            old = getattr(self, name)
            grown = self._empty(new_slots, new_capacity)
            grown[:, : old.shape[1], :, : old.shape[3]] = old
            setattr(self, name, grown)

    def bind(self, lo: int, hi: int, positions: torch.Tensor, width: int) -> None:
        """The next forward pass covers slots ``[lo, hi)``; row b writes its q new tokens at
        ``positions[b]`` ([hi - lo, q] int64) and attends over the first ``width`` positions."""
        self._width = width
        # Flat row indices into a layer's [slots * kv_heads * capacity, head_dim] view, so the
        # write is one index_copy_ (advanced-index assignment was ~1 ms per layer per step).
        slots = torch.arange(lo, hi, device=positions.device)[:, None, None]
        heads = torch.arange(self.kv_heads, device=positions.device)[None, :, None]
        self._index = ((slots * self.kv_heads + heads) * self.capacity + positions[:, None, :]).reshape(-1)
        # Per-pass views, so that a layer's update is two selects and two writes.
        self._flat = (
            self.keys.view(self.num_layers, -1, self.head_dim),
            self.values.view(self.num_layers, -1, self.head_dim),
        )
        self._windows = (self.keys[:, lo:hi, :, :width], self.values[:, lo:hi, :, :width])

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write [B, kv_heads, q, head_dim] new keys/values; return [B, kv_heads, width, head_dim] views."""
        flat_keys, flat_values = self._flat
        flat_keys[layer_idx].index_copy_(0, self._index, key_states.reshape(-1, self.head_dim))
        flat_values[layer_idx].index_copy_(0, self._index, value_states.reshape(-1, self.head_dim))
        return self._windows[0][layer_idx], self._windows[1][layer_idx]

    def copy_slot(self, source: int, target: int, length: int) -> None:
        """Copy the first ``length`` cached positions of slot ``source`` into ``target``."""
        self.keys[:, target, :, :length] = self.keys[:, source, :, :length]
        self.values[:, target, :, :length] = self.values[:, source, :, :length]

    def swap_slots(self, a: int, b: int, length: int) -> None:
        """Exchange the first ``length`` positions of two slots."""
        for tensor in (self.keys, self.values):
            saved = tensor[:, a, :, :length].clone()
            tensor[:, a, :, :length] = tensor[:, b, :, :length]
            tensor[:, b, :, :length] = saved

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._width

    def get_max_cache_shape(self, layer_idx: int = 0) -> int:
        return self.capacity

    @property
    def is_compileable(self) -> bool:
        return False
