"""CPU acceleration behind one seam: oneDNN linear layers, native AVX-512 decode kernels,
the lean decode forward, the chunked vocabulary head and malloc tuning.

The rest of the package calls only these names:

- loading a model: ``tune_malloc()`` (and ``release_memory()`` between phases, ``resident_bytes()``), ``set_linear_kernel(model, kernel)`` ("auto",
  "onednn" or "torch"; ``linear_kernel(model)`` says which is in place);
- a rollout session: ``packed_weights(model)`` (a context in which the oneDNN weights stay
  packed) and ``decoder_for(model)`` (the lean forward, or None: keep transformers');
- training: ``head_logprobs(lm_head, hidden, targets, ...)`` (log-probs and entropies over
  vocabulary chunks, never the whole [N, vocab] logits).

Each falls back to plain torch where its fast path does not apply (other devices or
dtypes, adapters, a machine without AVX-512 or a compiler), with the same numerics up to
float32 rounding. The modules: ``onednn`` (linear layers), ``native`` (+ native.cpp, the
AVX-512 kernels; ``native_build`` compiles and loads them), ``lean`` (decode forward), ``head`` (chunked head), ``allocator``.
"""

from agentic_rl.accel.allocator import device_peak_bytes, release_memory, reset_device_peak, resident_bytes, tune_malloc
from agentic_rl.accel.head import head_logprobs
from agentic_rl.accel.lean import LeanDecoder, decoder_for, lean_decoder
from agentic_rl.accel.onednn import (
    LINEAR_KERNELS,
    OneDNNLinear,
    linear_kernel,
    onednn_available,
    packed_weights,
    set_linear_kernel,
)

__all__ = [
    "LINEAR_KERNELS",
    "LeanDecoder",
    "OneDNNLinear",
    "decoder_for",
    "device_peak_bytes",
    "head_logprobs",
    "lean_decoder",
    "linear_kernel",
    "onednn_available",
    "packed_weights",
    "release_memory",
    "reset_device_peak",
    "resident_bytes",
    "set_linear_kernel",
    "tune_malloc",
]
