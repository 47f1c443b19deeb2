"""Float32 kernels for decoding on CPUs with AVX-512 (native.cpp).

A decode step multiplies one row per sequence by every weight matrix: it streams the
weights from memory and does little arithmetic on each. oneDNN's kernels reach about
24 GB/s of weights at 16 rows on our 2-core EPYC machines; :class:`PackedLinear` reaches
about 27-29 GB/s, matches oneDNN at prefill sizes (``benchmarks/native_kernels.py``
measures both), and can RMS-normalise its input rows as it reads them. It also takes
bfloat16 weights: a decode step then streams half the bytes, and the products are bf16
(each row rounded to bf16 after its norm, as torch's bf16 products round their inputs)
with float32 sums and outputs, on ``vdpbf16ps`` where the CPU has avx512_bf16 (two
products per lane and instruction) and on widened float32 FMAs otherwise (the same
values, summed in another order).
:func:`decode_attention` attends one new token per row over a slot cache's keys and
values in place (one call per layer instead of three batched products). The lean rollout
forward (accel/lean.py) uses both where they are available and oneDNN otherwise.

The kernels are C++ built on first use with the system compiler (``$CXX``, else ``c++``)
for this machine's CPU (about 3 s) and cached under ``<cache>/kernels``
(``AGENTIC_RL_CACHE``, default ``~/.cache/agentic-rl``), named by a hash of the source,
the flags, the compiler's version and the CPU's flags (accel/native_build.py): later
processes load the cached library, and a changed source or compiler builds a new one.
They are available on Linux x86-64 with AVX-512F, a C++ compiler and torch's OpenMP
runtime (which they share, so ``torch.set_num_threads`` applies), after a self-check
against torch. :func:`unavailable_reason` says why not otherwise (logged once per
process: a warning where this machine qualifies but the build failed, e.g. no compiler;
the callers then use oneDNN or torch); ``AGENTIC_RL_NATIVE=0`` turns them off. Results
equal torch's up to float32 rounding: each product output is an in-order sum over the
inputs (tests/accel/test_native.py).
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading

import torch
import torch.nn.functional as F

from agentic_rl.accel import native_build

logger = logging.getLogger(__name__)

OPS = {"none": 0, "add": 1, "mul": 2, "swish": 3}
"""Epilogues applied to x W^T + b before the store: add / multiply by ``other``, or SiLU."""
WEIGHT_DTYPES = {torch.float32: "", torch.bfloat16: "_bf16"}
"""The weight dtypes :class:`PackedLinear` takes, and their kernels' name suffix."""

_lock = threading.Lock()
_state: dict = {}


def _library():
    """The kernels by name (and "block", the packed column width) or None; loaded, and
    checked against torch, once per process. Never raises: a machine without the kernels
    (logged once) decodes on oneDNN."""
    if "library" in _state:
        return _state["library"]
    with _lock:
        if "library" not in _state:
            library, reason, level = None, None, logging.INFO  # not for this machine: no warning
            if os.environ.get("AGENTIC_RL_NATIVE", "1") == "0":
                reason = "turned off by AGENTIC_RL_NATIVE=0"
            else:
                try:
                    native_build.check_machine()
                    # This machine qualifies: a failure from here on (no compiler, a failed
                    # build or self-check) costs decode speed and is worth a warning.
                    level = logging.WARNING
                    library = native_build.load()
                    _state["library"] = library  # the self-check below runs the kernel
                    reason = _self_check()
                except (OSError, RuntimeError, subprocess.SubprocessError) as error:
                    reason = str(error)
                if reason:
                    library = None
                    logger.log(level, "native CPU kernels not used (decoding uses oneDNN): %s", reason)
            _state["library"], _state["reason"] = library, reason
    return _state["library"]


def _self_check() -> str | None:
    generator = torch.Generator().manual_seed(0)
    x, weight, bias = (torch.randn(shape, generator=generator) for shape in ((11, 70), (53, 70), (53,)))
    if not torch.allclose(PackedLinear(weight, bias)(x), F.linear(x, weight, bias), rtol=1e-4, atol=1e-4):
        return "the compiled product kernel disagrees with torch on a self-check"
    rounded = weight.to(torch.bfloat16)
    expected = F.linear(x.to(torch.bfloat16).float(), rounded.float(), bias)
    if not torch.allclose(PackedLinear(rounded, bias)(x), expected, rtol=1e-4, atol=1e-4):
        return "the compiled bf16-weight product kernel disagrees with torch on a self-check"
    queries, keys, values = (
        torch.randn(shape, generator=generator) for shape in ((2, 4 * 16), (2, 2, 5, 16), (2, 2, 5, 16))
    )
    lengths = torch.tensor([5, 3])
    if not torch.allclose(
        decode_attention(queries, keys, values, lengths),
        _attention_reference(queries, keys, values, lengths),
        rtol=1e-4,
        atol=1e-5,
    ):
        return "the compiled attention kernel disagrees with torch on a self-check"
    return None


def _attention_reference(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor
) -> torch.Tensor:
    """:func:`decode_attention` in torch (the definition the kernel is checked against)."""
    batch, kv_heads, width, head_dim = keys.shape
    query = queries.view(batch, kv_heads, -1, head_dim)
    mask = torch.arange(width)[None, None, None, :] < lengths[:, None, None, None]
    out = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=1.0)
    return out.reshape(batch, -1)


def available() -> bool:
    """Whether :class:`PackedLinear` and :func:`decode_attention` can run here (builds the
    kernels on the first call of a process)."""
    return _library() is not None


def unavailable_reason() -> str | None:
    """Why the kernels are not available, or None when they are."""
    _library()
    return _state.get("reason")


class PackedLinear:
    """``op``(x W^T + b) for float32 CPU rows, with ``weight`` [out, in] and ``bias`` copied
    into the kernel's layout: valid while they do not change. No autograd (inference only).
    With a bfloat16 ``weight`` the rows are rounded to bf16 for the products (after the
    norm below); sums, epilogues and outputs are float32 either way.

    ``packed(x, op="none", other=None)``: ``x`` [..., in] -> [..., out]; ``op`` one of
    :data:`OPS` ("add" and "mul" take ``other`` of the output's shape). With ``norm_weight``
    [in], x is first RMS-normalised, x * rsqrt(mean(x^2) + norm_eps) * norm_weight, as it is
    read (the RMSNorm before a decoder's projections, without its own pass)."""

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        *,
        norm_weight: torch.Tensor | None = None,
        norm_eps: float = 1e-6,
    ) -> None:
        kernels = _required()
        if weight.dim() != 2 or weight.dtype not in WEIGHT_DTYPES or weight.device.type != "cpu" or 0 in weight.shape:
            raise ValueError(
                f"PackedLinear: weight must be a non-empty 2-D float32 or bfloat16 CPU tensor, got {tuple(weight.shape)} {weight.dtype} on {weight.device}"
            )
        weight = weight.detach()
        if weight.stride(1) != 1:
            weight = weight.contiguous()
        self.out_features, self.in_features = weight.shape
        block = kernels["block"]
        suffix = WEIGHT_DTYPES[weight.dtype]
        step = 2 if weight.dtype == torch.bfloat16 else 1  # bf16 weights are packed in pairs along k
        depth = -(-self.in_features // step) * step
        self.data = torch.empty(-(-self.out_features // block), depth, block, dtype=weight.dtype)
        kernels[f"pack{suffix}"](
            weight.data_ptr(), self.out_features, self.in_features, weight.stride(0), self.data.data_ptr()
        )
        self.bias = _vector(bias, self.out_features, "bias")
        self.norm_weight = _vector(norm_weight, self.in_features, "norm_weight")
        self.norm_eps = float(norm_eps)
        # Fixed arguments of every call (a decode step makes ~150 calls: keep them cheap).
        self._gemm = kernels[f"gemm{suffix}"]
        self._fixed = (self.data.data_ptr(), self.out_features, None if self.bias is None else self.bias.data_ptr())
        self._norm = (None if self.norm_weight is None else self.norm_weight.data_ptr(), self.norm_eps)

    def __call__(self, x: torch.Tensor, op: str = "none", other: torch.Tensor | None = None) -> torch.Tensor:
        # The checks stay cheap (attributes, no device objects): this runs ~150 times a step.
        code = OPS.get(op)
        if (
            code is None
            or x.dtype is not torch.float32
            or not x.is_cpu
            or not x.ndim
            or x.shape[-1] != self.in_features
        ):
            raise ValueError(self._bad_input(x, op))
        if not x.is_contiguous():
            x = x.contiguous()
        out = torch.empty((*x.shape[:-1], self.out_features))  # a tuple: torch.Size + tuple costs 2 us
        other_pointer = None
        if code == 1 or code == 2:
            if other is None or other.shape != out.shape or other.dtype is not torch.float32 or not other.is_cpu:
                raise ValueError(f"PackedLinear: op {op!r} needs other, float32 on CPU of shape {tuple(out.shape)}")
            if not other.is_contiguous():
                other = other.contiguous()
            other_pointer = other.data_ptr()
        rows = x.numel() // self.in_features
        if rows:
            weight, out_features, bias = self._fixed
            if (
                self._gemm(
                    x.data_ptr(),
                    rows,
                    self.in_features,
                    weight,
                    out_features,
                    bias,
                    code,
                    other_pointer,
                    out.data_ptr(),
                    *self._norm,
                )
                != 0
            ):
                raise MemoryError("PackedLinear: could not allocate the kernel's row panels")
        return out

    def _bad_input(self, x: torch.Tensor, op: str) -> str:
        if op not in OPS:
            return f"PackedLinear: op {op!r} is not one of: {', '.join(OPS)}"
        return f"PackedLinear: x must be float32 on CPU with last dimension {self.in_features}, got {tuple(x.shape)} {x.dtype} on {x.device}"


def _vector(value: torch.Tensor | None, size: int, name: str) -> torch.Tensor | None:
    """A float32 copy of a bias or norm weight (bf16 ones widen exactly)."""
    if value is None:
        return None
    if value.shape != (size,) or value.dtype not in WEIGHT_DTYPES or value.device.type != "cpu":
        raise ValueError(
            f"PackedLinear: {name} must be float32 or bfloat16 on CPU of shape ({size},), got {tuple(value.shape)} {value.dtype}"
        )
    return value.detach().to(torch.float32, copy=True).contiguous()


def decode_attention(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor
) -> torch.Tensor:
    """Attention of one new token per row over cached keys and values (no autograd).

    ``queries`` [B, heads * D] (rows may be strided, e.g. a slice of a fused q/k/v output;
    any scaling already applied); ``keys``, ``values`` [B, kv_heads, width, D] views with the
    same strides, rows of D contiguous floats (a slot cache's window); ``lengths`` [B]: row b
    attends to its first lengths[b] positions (1 <= lengths[b] <= width). Query head
    kv * groups + g reads kv head kv (grouped-query attention). Returns [B, heads * D]:
    softmax(q k^T) v per head. D must be a multiple of 16."""
    kernels = _required()
    batch, kv_heads, width, head_dim = keys.shape
    if lengths.dtype is not torch.int64 or not lengths.is_contiguous():
        lengths = lengths.to(torch.int64).contiguous()
    if (
        queries.dtype is not torch.float32
        or keys.dtype is not torch.float32
        or values.dtype is not torch.float32
        or not (queries.is_cpu and keys.is_cpu and values.is_cpu and lengths.is_cpu)
        or head_dim % 16
        or queries.dim() != 2
        or queries.shape[0] != batch
        or queries.stride(1) != 1
        or queries.shape[1] % (kv_heads * head_dim)
        or values.shape != keys.shape
        or values.stride() != keys.stride()
        or keys.stride(3) != 1
        or keys.stride(2) != head_dim
        or lengths.shape != (batch,)
    ):
        raise ValueError(
            f"decode_attention: expected float32 CPU queries [B, heads * D] and keys/values [B, kv_heads, width, D] with equal strides, "
            f"D a multiple of 16, lengths [B]; got queries {tuple(queries.shape)}, keys {tuple(keys.shape)} {tuple(keys.stride())}, "
            f"values {tuple(values.shape)} {tuple(values.stride())}, lengths {tuple(lengths.shape)}"
        )
    out = torch.empty(batch, queries.shape[1])
    status = batch and kernels["decode_attention"](
        queries.data_ptr(),
        queries.stride(0),
        keys.data_ptr(),
        values.data_ptr(),
        keys.stride(0),
        keys.stride(1),
        lengths.data_ptr(),
        width,
        batch,
        kv_heads,
        queries.shape[1] // (kv_heads * head_dim),
        head_dim,
        out.data_ptr(),
    )
    if status == -2:  # checked in the kernel: no extra pass over lengths per layer
        raise ValueError(f"decode_attention: lengths must be in [1, {width}], got {lengths.tolist()}")
    if status:
        raise MemoryError("decode_attention: could not allocate the kernel's score rows")
    return out


def _required():
    library = _library()
    if library is None:
        raise RuntimeError(f"the native kernels are not available: {_state.get('reason')}")
    return library
