"""A decoder model's shape (layers, widths, heads, vocabulary) and what it implies
(parameter count, LoRA parameters, KV-cache bytes per token), read from its
``config.json`` without loading any weights."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The projections a LoRA adapter can target, by their Llama/Qwen names."""


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a Llama-style decoder (Llama, Qwen2/2.5/3, Mistral, SmolLM) that memory depends on."""

    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tie_word_embeddings: bool
    attention_bias: bool = False
    qk_norm: bool = False

    @classmethod
    def from_config(cls, config: dict, name: str = "model") -> ModelShape:
        """From a Hugging Face ``config.json`` dict; a ValueError names a missing key."""
        if not isinstance(config, dict):
            raise ValueError(f"{name}: config.json is not a JSON object")
        config = config.get("text_config", config)  # multimodal wrappers keep the decoder's numbers here
        try:
            hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
            shape = cls(
                name=name,
                vocab_size=int(config["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(config["intermediate_size"]),
                num_layers=int(config["num_hidden_layers"]),
                num_heads=heads,
                num_kv_heads=int(config.get("num_key_value_heads") or heads),
                head_dim=int(config.get("head_dim") or hidden // heads),
                tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
                # Qwen2 puts biases on q, k and v without saying so in its config.
                attention_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
                qk_norm=config.get("model_type") in ("qwen3", "qwen3_moe"),
            )
        except KeyError as exc:
            raise ValueError(
                f"{name}: config.json has no {exc.args[0]!r}; the planner reads Llama-style decoder configs"
            ) from None
        except (TypeError, ValueError):
            raise ValueError(f"{name}: config.json holds a non-numeric size") from None
        return shape

    @property
    def q_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    def layer_params(self) -> int:
        h, i = self.hidden_size, self.intermediate_size
        attention = h * self.q_width + 2 * h * self.kv_width + self.q_width * h
        bias = self.q_width + 2 * self.kv_width if self.attention_bias else 0
        norms = 2 * h + (2 * self.head_dim if self.qk_norm else 0)
        return attention + bias + 3 * h * i + norms

    @property
    def num_params(self) -> int:
        """All parameters (a tied head counted once)."""
        head = 0 if self.tie_word_embeddings else self.embedding_params
        return self.embedding_params + self.num_layers * self.layer_params() + self.hidden_size + head

    def lora_params(self, r: int, target_modules: list[str] | tuple[str, ...] = LORA_MODULES) -> int:
        """Trainable parameters of a rank-``r`` LoRA adapter on ``target_modules`` of every layer."""
        h, i = self.hidden_size, self.intermediate_size
        sizes = {
            "q_proj": (h, self.q_width),
            "k_proj": (h, self.kv_width),
            "v_proj": (h, self.kv_width),
            "o_proj": (self.q_width, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }
        unknown = [m for m in target_modules if m not in sizes]
        if unknown:
            raise ValueError(f"lora.target_modules: the planner knows {', '.join(sizes)}, not {', '.join(unknown)}")
        return self.num_layers * sum(r * sum(sizes[m]) for m in target_modules)

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV-cache bytes one token holds across all layers."""
        return 2 * self.num_layers * self.kv_width * dtype_bytes


KNOWN_CONFIGS: dict[str, dict] = {
    # The published config.json numbers of models people train, so that `agentic-rl plan`
    # works offline for their hub ids (a local folder or the Hugging Face cache wins).
    "HuggingFaceTB/SmolLM2-135M-Instruct": dict(
        model_type="llama",
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        tie_word_embeddings=True,
    ),
    "Qwen/Qwen2.5-0.5B-Instruct": dict(
        model_type="qwen2",
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    ),
    "Qwen/Qwen2.5-1.5B-Instruct": dict(
        model_type="qwen2",
        vocab_size=151936,
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    ),
    "Qwen/Qwen2.5-3B-Instruct": dict(
        model_type="qwen2",
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=11008,
        num_hidden_layers=36,
        num_attention_heads=16,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    ),
    "Qwen/Qwen2.5-7B-Instruct": dict(
        model_type="qwen2",
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        tie_word_embeddings=False,
    ),
    "Qwen/Qwen2.5-14B-Instruct": dict(
        model_type="qwen2",
        vocab_size=152064,
        hidden_size=5120,
        intermediate_size=13824,
        num_hidden_layers=48,
        num_attention_heads=40,
        num_key_value_heads=8,
        tie_word_embeddings=False,
    ),
    "Qwen/Qwen2.5-32B-Instruct": dict(
        model_type="qwen2",
        vocab_size=152064,
        hidden_size=5120,
        intermediate_size=27648,
        num_hidden_layers=64,
        num_attention_heads=40,
        num_key_value_heads=8,
        tie_word_embeddings=False,
    ),
    "Qwen/Qwen3-4B": dict(
        model_type="qwen3",
        vocab_size=151936,
        hidden_size=2560,
        intermediate_size=9728,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=True,
    ),
    "Qwen/Qwen3-8B": dict(
        model_type="qwen3",
        vocab_size=151936,
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=False,
    ),
    "meta-llama/Llama-3.2-1B-Instruct": dict(
        model_type="llama",
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        tie_word_embeddings=True,
    ),
    "meta-llama/Llama-3.2-3B-Instruct": dict(
        model_type="llama",
        vocab_size=128256,
        hidden_size=3072,
        intermediate_size=8192,
        num_hidden_layers=28,
        num_attention_heads=24,
        num_key_value_heads=8,
        tie_word_embeddings=True,
    ),
    "meta-llama/Llama-3.1-8B-Instruct": dict(
        model_type="llama",
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        tie_word_embeddings=False,
    ),
}
# The base (non-Instruct) checkpoints share their Instruct siblings' shapes.
KNOWN_CONFIGS.update(
    {
        name.removesuffix("-Instruct"): config
        for name, config in list(KNOWN_CONFIGS.items())
        if name.endswith("-Instruct")
    }
)


def _cached_hub_config(hub_id: str) -> dict | None:
    """config.json from the local Hugging Face cache (nothing is downloaded)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    path = try_to_load_from_cache(hub_id, "config.json")
    return json.loads(Path(path).read_text()) if isinstance(path, str) else None


def model_shape(name_or_path: str, builtin: dict[str, dict] | None = None) -> ModelShape:
    """The shape of a built-in model (``builtin``: name -> config dict), a local folder's
    ``config.json``, a cached or known hub id; a ValueError says what to pass instead."""
    if builtin and name_or_path in builtin:
        return ModelShape.from_config(builtin[name_or_path], name_or_path)
    folder = Path(name_or_path).expanduser()
    if folder.is_dir():
        try:
            config = json.loads((folder / "config.json").read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"model.name: could not read {folder / 'config.json'}: {exc}") from None
        return ModelShape.from_config(config, name_or_path)
    config = _cached_hub_config(name_or_path) if name_or_path.count("/") == 1 else None
    config = config or KNOWN_CONFIGS.get(name_or_path)
    if config is None:
        raise ValueError(
            f"model.name: no config.json for {name_or_path!r} (not a local folder, not in the Hugging Face cache, not one of the {len(KNOWN_CONFIGS)} known hub ids); pass a folder holding its config.json"
        )
    return ModelShape.from_config(config, name_or_path)
