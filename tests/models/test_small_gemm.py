"""small_gemm's AVX-512 kernel equals F.linear (and its epilogues the torch ops they fuse)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from agentic_rl.models import small_gemm

needs_kernel = pytest.mark.skipif(not small_gemm.available(), reason=f"small_gemm: {small_gemm.unavailable_reason()}")


def _tensors(*shapes, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator) for shape in shapes]


def _loop_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The plain loop: each output a float64 sum over the inputs."""
    out = torch.zeros(x.shape[0], weight.shape[0], dtype=torch.float64)
    for m in range(x.shape[0]):
        for n in range(weight.shape[0]):
            out[m, n] = sum(float(x[m, k]) * float(weight[n, k]) for k in range(x.shape[1])) + (float(bias[n]) if bias is not None else 0.0)
    return out


@needs_kernel
def test_matches_a_plain_loop_and_hand_values() -> None:
    x = torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]])
    weight = torch.tensor([[1.0, 0.0, -1.0], [2.0, 1.0, 0.5]])
    bias = torch.tensor([0.25, -1.0])
    out = small_gemm.PackedLinear(weight, bias)(x)
    assert torch.equal(out, torch.tensor([[1.0 - 3.0 + 0.25, 2.0 + 2.0 + 1.5 - 1.0], [-1.0 + 0.25, -2.0 + 0.5 - 1.0]]))
    x, weight, bias = _tensors((9, 37), (50, 37), (50,))
    torch.testing.assert_close(small_gemm.PackedLinear(weight, bias)(x).double(), _loop_reference(x, weight, bias), rtol=1e-5, atol=1e-5)


@needs_kernel
@pytest.mark.parametrize("rows", [1, 7, 8, 9, 16, 33, 130])  # whole and partial 8-row tiles
@pytest.mark.parametrize(("out_features", "in_features"), [(1, 5), (48, 64), (50, 70), (97, 1), (200, 33)])  # whole and partial 48-column blocks
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_f_linear(rows, out_features, in_features, with_bias) -> None:
    x, weight, bias = _tensors((rows, in_features), (out_features, in_features), (out_features,), seed=rows + out_features)
    bias = bias if with_bias else None
    packed = small_gemm.PackedLinear(weight, bias)
    out = packed(x)
    assert out.shape == (rows, out_features) and out.dtype == torch.float32
    torch.testing.assert_close(out, F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)


@needs_kernel
def test_epilogues_equal_the_ops_they_fuse() -> None:
    x, weight, bias, other = _tensors((2, 5, 64), (100, 64), (100,), (2, 5, 100))
    packed = small_gemm.PackedLinear(weight, bias)
    plain = F.linear(x, weight, bias)
    assert packed(x).shape == (2, 5, 100)  # leading dimensions kept
    torch.testing.assert_close(packed(x, "add", other), plain + other, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed(x, "mul", other), plain * other, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed(x, "swish"), F.silu(plain), rtol=1e-5, atol=1e-5)


@needs_kernel
def test_swish_holds_over_the_whole_float_range() -> None:
    values = torch.cat([torch.linspace(-120, 100, 20001), torch.tensor([0.0, -0.0, 1e-30, -1e-30, 88.0, -88.0, 3e38, -3e38])])
    got = small_gemm.PackedLinear(torch.ones(1, 1))(values[:, None], "swish")[:, 0]
    expected = F.silu(values.double())
    torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=1e-30)


@needs_kernel
def test_results_do_not_depend_on_the_thread_count() -> None:
    """Each output is one in-order sum, whichever thread computes it."""
    x, weight = _tensors((16, 300), (500, 300))
    packed = small_gemm.PackedLinear(weight)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = packed(x)
        torch.set_num_threads(max(2, threads))
        many = packed(x)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, many)


@needs_kernel
def test_views_and_empty_inputs() -> None:
    x, weight = _tensors((6, 40), (30, 80))
    packed = small_gemm.PackedLinear(weight[:, ::2])  # strided weight view
    torch.testing.assert_close(packed(x.t().contiguous().t()), F.linear(x, weight[:, ::2]), rtol=1e-5, atol=1e-5)
    assert packed(torch.empty(0, 40)).shape == (0, 30)


@needs_kernel
def test_bad_input_names_the_problem() -> None:
    packed = small_gemm.PackedLinear(torch.randn(4, 3))
    with pytest.raises(ValueError, match="last dimension 3"):
        packed(torch.randn(2, 5))
    with pytest.raises(ValueError, match="float32"):
        packed(torch.randn(2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="op 'gelu' is not one of: none, add, mul, swish"):
        packed(torch.randn(2, 3), "gelu")
    with pytest.raises(ValueError, match=r"op 'add' needs other, float32 on CPU of shape \(2, 4\)"):
        packed(torch.randn(2, 3), "add", torch.randn(2, 3))
    with pytest.raises(ValueError, match="2-D float32"):
        small_gemm.PackedLinear(torch.randn(4))
    with pytest.raises(ValueError, match=r"bias must be float32 on CPU of shape \(4,\)"):
        small_gemm.PackedLinear(torch.randn(4, 3), torch.randn(3))


def test_turned_off_or_unbuildable_says_why(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(small_gemm, "_state", {})
    monkeypatch.setenv("AGENTIC_RL_SMALL_GEMM", "0")
    assert not small_gemm.available()
    assert small_gemm.unavailable_reason() == "turned off by AGENTIC_RL_SMALL_GEMM=0"
    with pytest.raises(RuntimeError, match="not available: turned off"):
        small_gemm.PackedLinear(torch.randn(2, 2))
    if not small_gemm._cpu_flags():
        return  # not Linux: the compiler is never reached
    monkeypatch.setattr(small_gemm, "_state", {})
    monkeypatch.delenv("AGENTIC_RL_SMALL_GEMM")
    monkeypatch.setenv("AGENTIC_RL_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "false")  # a "compiler" that always fails
    monkeypatch.setattr(small_gemm, "_load_checks", lambda: None)  # reach the build on any CPU
    assert not small_gemm.available()
    assert small_gemm.unavailable_reason() == "false failed: no output"
    assert not list((tmp_path / "kernels").glob("*.so*"))  # no partial library left behind


@needs_kernel
def test_the_build_is_cached_per_source(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("AGENTIC_RL_CACHE", str(tmp_path))
    first = small_gemm._build(small_gemm._compiler())
    assert first.parent == tmp_path / "kernels" and first.name.startswith("small_gemm-") and first.suffix == ".so"
    stamp = first.stat().st_mtime_ns
    assert small_gemm._build(small_gemm._compiler()) == first and first.stat().st_mtime_ns == stamp  # not rebuilt
    assert [p.name for p in (tmp_path / "kernels").iterdir()] == [first.name]
