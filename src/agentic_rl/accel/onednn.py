"""Linear-layer kernels for float32 on CPU: oneDNN instead of the default BLAS.

PyTorch runs fp32 ``nn.Linear`` on CPU through MKL, and MKL picks a slow code path on
CPUs it does not recognise (on the AMD EPYC machines we develop on it reaches about 180
GFLOP/s where oneDNN's AVX-512 kernels, shipped inside the same torch wheel, reach about
400: ``benchmarks/train_throughput.py`` measures both). Every matmul of a small model is
a linear layer, so the choice decides both rollout and training speed.

``set_linear_kernel(model, "onednn")`` swaps each ``nn.Linear`` of ``model`` to
:class:`OneDNNLinear` in place (same parameters, same state-dict keys, so optimizers,
checkpoints and peft wrappers are unaffected). Its forward and backward are oneDNN
inner products (results equal ``F.linear`` up to float32 rounding, about 1e-6 relative);
anything it does not cover (other devices or dtypes, torch.compile tracing, empty
inputs, autocast) goes through ``F.linear`` unchanged.

Decoding reads every weight once per generated token, and oneDNN is faster still with
weights pre-packed into its blocked layout; :func:`packed_weights` packs them for the
duration of a rollout (when the weights cannot change) and frees the copies afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F

LINEAR_KERNELS = ("auto", "onednn", "torch")

_PACK_BATCH_HINT = 16
"""Row count oneDNN tunes the packed layout for (decode batches are 1-64 rows; measured
no slower than dense weights up to 2048 rows)."""


def onednn_available() -> bool:
    try:
        return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    except (AttributeError, RuntimeError):
        return False


def onednn_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *, activation: str = "none"
) -> torch.Tensor:
    """x W^T + b on oneDNN; ``weight`` dense (views allowed) or from :func:`pack_weight`.
    ``activation``: a oneDNN post-op applied in the same pass ("none", "swish" = SiLU, "relu", ...)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, activation, [], "")


def onednn_linear_then(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, op: str, other: torch.Tensor
) -> torch.Tensor:
    """(x W^T + b) ``op`` other, in one oneDNN pass; ``op`` "add" or "mul" (``other`` has the output's shape)."""
    return torch.ops.mkldnn._linear_pointwise.binary(x, other, weight, bias, op)


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` [out, in] reordered into oneDNN's blocked layout for :func:`onednn_linear`
    (a copy: valid only while the weight does not change)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), _PACK_BATCH_HINT)


class _OneDNNLinearFunction(torch.autograd.Function):
    """y = x W^T + b with oneDNN in both directions (dx = dy W, dW = dy^T x, db = sum dy)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return onednn_linear(x, weight, bias)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        flat_grad = grad.reshape(-1, grad.shape[-1])
        grad_x = grad_weight = grad_bias = None
        # oneDNN reads transposed views through their strides: copying them first was
        # slower than the product itself (a strided 12 MB copy takes ~20 ms here).
        if ctx.needs_input_grad[0]:
            grad_x = onednn_linear(grad, weight.t(), None)
        if ctx.needs_input_grad[1]:
            # dW[o, i] = sum_m dy[m, o] x[m, i]: an inner product of dy^T with x^T as "weight".
            grad_weight = onednn_linear(flat_grad.t(), x.reshape(-1, x.shape[-1]).t(), None)
        if ctx.needs_input_grad[2]:
            grad_bias = flat_grad.sum(0)
        return grad_x, grad_weight, grad_bias


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *, onednn: bool = True
) -> torch.Tensor:
    """``F.linear`` without autograd tracking, on oneDNN when ``onednn`` and the inputs
    allow it (float32 CPU tensors; transposed views are read in place)."""
    if (
        onednn
        and x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and x.numel()
        and onednn_available()
        and not torch.compiler.is_compiling()
        and not torch.is_autocast_enabled("cpu")
    ):
        return onednn_linear(x, weight, bias)
    return F.linear(x, weight, bias)


class OneDNNLinear(torch.nn.Linear):
    """``nn.Linear`` whose float32 CPU forward and backward run on oneDNN.

    Created only by :func:`set_linear_kernel` (a class swap: the module keeps its
    parameters)."""

    _packed: tuple[int, int, torch.Tensor] | None = None
    _packing: bool = False

    def _fast(self, x: torch.Tensor) -> bool:
        weight = self.weight
        return (
            x.device.type == "cpu"
            and weight.device.type == "cpu"
            and x.dtype == torch.float32
            and weight.dtype == torch.float32
            and x.numel() > 0
            and x.dim() >= 2
            and not torch.compiler.is_compiling()
            and not torch.is_autocast_enabled("cpu")  # bf16-mixed: F.linear takes autocast's bf16 product
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._fast(x):
            return F.linear(x, self.weight, self.bias)
        needs_grad = torch.is_grad_enabled() and (
            x.requires_grad or self.weight.requires_grad or (self.bias is not None and self.bias.requires_grad)
        )
        if needs_grad:
            return _OneDNNLinearFunction.apply(x, self.weight, self.bias)
        if self._packing:
            return onednn_linear(x, self._packed_weight(), self.bias)
        return onednn_linear(x, self.weight, self.bias)

    def _packed_weight(self) -> torch.Tensor:
        # Keyed on storage and version as a second guard; packed_weights() is the real
        # scope (``param.data.copy_`` changes values without bumping the version).
        weight = self.weight.detach()
        key = (weight.data_ptr(), self.weight._version)
        if self._packed is None or self._packed[:2] != key:
            self._packed = (*key, pack_weight(weight))
        return self._packed[2]


def _resolve(model, kernel: str) -> str:
    if kernel not in LINEAR_KERNELS:
        raise ValueError(f"linear kernel {kernel!r} is not one of: {', '.join(LINEAR_KERNELS)}")
    if kernel == "auto":
        parameter = next(model.parameters(), None)
        on_cpu_fp32 = parameter is not None and parameter.device.type == "cpu" and parameter.dtype == torch.float32
        return "onednn" if on_cpu_fp32 and onednn_available() else "torch"
    if kernel == "onednn" and not onednn_available():
        raise ValueError("linear kernel 'onednn' needs a torch build with oneDNN (mkldnn); use 'auto' or 'torch'")
    return kernel


def set_linear_kernel(model, kernel: str = "auto") -> str:
    """Use ``kernel`` for every ``nn.Linear`` in ``model`` (in place); returns the one chosen.

    "auto" picks "onednn" for float32 models on CPU when torch has oneDNN, else "torch".
    Modules still take other inputs (devices, dtypes) through ``F.linear``."""
    chosen = _resolve(model, kernel)
    for module in model.modules():
        if chosen == "onednn" and type(module) is torch.nn.Linear:
            module.__class__ = OneDNNLinear
        elif chosen == "torch" and type(module) is OneDNNLinear:
            module.__class__ = torch.nn.Linear
            module.__dict__.pop("_packed", None)
            module.__dict__.pop("_packing", None)
    return chosen


def linear_kernel(model) -> str:
    """ "onednn" when ``model`` has oneDNN linear layers, else "torch"."""
    return "onednn" if any(type(m) is OneDNNLinear for m in model.modules()) else "torch"


@contextlib.contextmanager
def packed_weights(model) -> Iterator[None]:
    """Within the block, gradient-free forwards of ``model``'s oneDNN linears use weights
    packed once (on first use) into oneDNN's blocked layout; the copies are freed on exit.
    The weights must not change inside the block (a rollout: no optimizer steps)."""
    modules = [m for m in model.modules() if type(m) is OneDNNLinear and not m._packing]
    for module in modules:
        module._packing = True
    try:
        yield
    finally:
        for module in modules:
            module.__dict__.pop("_packing", None)
            module.__dict__.pop("_packed", None)
