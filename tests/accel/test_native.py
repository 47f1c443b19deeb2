"""The native AVX-512 product kernel equals F.linear (and its epilogues the torch ops they fuse)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from agentic_rl.accel import native, native_build

needs_kernel = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.unavailable_reason()}")


def _tensors(*shapes, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator) for shape in shapes]


def _loop_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The plain loop: each output a float64 sum over the inputs."""
    out = torch.zeros(x.shape[0], weight.shape[0], dtype=torch.float64)
    for m in range(x.shape[0]):
        for n in range(weight.shape[0]):
            out[m, n] = sum(float(x[m, k]) * float(weight[n, k]) for k in range(x.shape[1])) + (
                float(bias[n]) if bias is not None else 0.0
            )
    return out


@needs_kernel
def test_matches_a_plain_loop_and_hand_values() -> None:
    x = torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]])
    weight = torch.tensor([[1.0, 0.0, -1.0], [2.0, 1.0, 0.5]])
    bias = torch.tensor([0.25, -1.0])
    out = native.PackedLinear(weight, bias)(x)
    assert torch.equal(out, torch.tensor([[1.0 - 3.0 + 0.25, 2.0 + 2.0 + 1.5 - 1.0], [-1.0 + 0.25, -2.0 + 0.5 - 1.0]]))
    x, weight, bias = _tensors((9, 37), (50, 37), (50,))
    torch.testing.assert_close(
        native.PackedLinear(weight, bias)(x).double(), _loop_reference(x, weight, bias), rtol=1e-5, atol=1e-5
    )


@needs_kernel
@pytest.mark.parametrize("rows", [1, 7, 8, 9, 16, 33, 130])  # whole and partial 8-row tiles
@pytest.mark.parametrize(
    ("out_features", "in_features"), [(1, 5), (48, 64), (50, 70), (97, 1), (200, 33)]
)  # whole and partial 48-column blocks
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_f_linear(rows, out_features, in_features, with_bias) -> None:
    x, weight, bias = _tensors(
        (rows, in_features), (out_features, in_features), (out_features,), seed=rows + out_features
    )
    bias = bias if with_bias else None
    packed = native.PackedLinear(weight, bias)
    out = packed(x)
    assert out.shape == (rows, out_features) and out.dtype == torch.float32
    torch.testing.assert_close(out, F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)


@needs_kernel
def test_epilogues_equal_the_ops_they_fuse() -> None:
    x, weight, bias, other = _tensors((2, 5, 64), (100, 64), (100,), (2, 5, 100))
    packed = native.PackedLinear(weight, bias)
    plain = F.linear(x, weight, bias)
    assert packed(x).shape == (2, 5, 100)  # leading dimensions kept
    torch.testing.assert_close(packed(x, "add", other), plain + other, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed(x, "mul", other), plain * other, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed(x, "swish"), F.silu(plain), rtol=1e-5, atol=1e-5)


@needs_kernel
def test_swish_holds_over_the_whole_float_range() -> None:
    values = torch.cat(
        [torch.linspace(-120, 100, 20001), torch.tensor([0.0, -0.0, 1e-30, -1e-30, 88.0, -88.0, 3e38, -3e38])]
    )
    got = native.PackedLinear(torch.ones(1, 1))(values[:, None], "swish")[:, 0]
    expected = F.silu(values.double())
    torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=1e-30)


@needs_kernel
def test_results_do_not_depend_on_the_thread_count() -> None:
    """Each output is one in-order sum, whichever thread computes it."""
    x, weight = _tensors((16, 300), (500, 300))
    packed = native.PackedLinear(weight)
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
    packed = native.PackedLinear(weight[:, ::2])  # strided weight view
    torch.testing.assert_close(packed(x.t().contiguous().t()), F.linear(x, weight[:, ::2]), rtol=1e-5, atol=1e-5)
    assert packed(torch.empty(0, 40)).shape == (0, 30)


@needs_kernel
def test_bad_input_names_the_problem() -> None:
    packed = native.PackedLinear(torch.randn(4, 3))
    with pytest.raises(ValueError, match="last dimension 3"):
        packed(torch.randn(2, 5))
    with pytest.raises(ValueError, match="float32"):
        packed(torch.randn(2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="op 'gelu' is not one of: none, add, mul, swish"):
        packed(torch.randn(2, 3), "gelu")
    with pytest.raises(ValueError, match=r"op 'add' needs other, float32 on CPU of shape \(2, 4\)"):
        packed(torch.randn(2, 3), "add", torch.randn(2, 3))
    with pytest.raises(ValueError, match="non-empty 2-D float32 or bfloat16"):
        native.PackedLinear(torch.randn(4))
    with pytest.raises(ValueError, match="non-empty 2-D float32 or bfloat16 CPU tensor, got \\(4, 3\\) torch.float16"):
        native.PackedLinear(torch.randn(4, 3, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"bias must be float32 or bfloat16 on CPU of shape \(4,\)"):
        native.PackedLinear(torch.randn(4, 3), torch.randn(3))


@pytest.mark.parametrize("in_features", [53, 64])  # odd: the last k pair is padded
@pytest.mark.parametrize("rows", [1, 9, 40])
@pytest.mark.parametrize("op", ["none", "add", "swish"])
def test_bf16_weights_are_bf16_products_with_float32_sums(rows, op, in_features) -> None:
    """bf16 weights: each row (after its norm) is rounded to bf16 and the products summed
    in float32, as a plain loop over the rounded values computes them."""
    generator = torch.Generator().manual_seed(rows)
    weight = torch.randn(70, in_features, generator=generator).to(torch.bfloat16)
    bias, norm = torch.randn(70, generator=generator), torch.rand(in_features, generator=generator).to(torch.bfloat16)
    x, other = torch.randn(rows, in_features, generator=generator), torch.randn(rows, 70, generator=generator)
    extra = {"other": other} if op == "add" else {}
    got = native.PackedLinear(weight, bias, norm_weight=norm)(x, op, **extra)
    assert got.dtype == torch.float32
    normed = F.rms_norm(x, (in_features,), norm.float(), 1e-6).to(torch.bfloat16).double()
    expected = torch.zeros(rows, 70, dtype=torch.float64)
    for i in range(rows):
        for j in range(70):
            expected[i, j] = bias[j].double() + sum(normed[i, k] * weight[j, k].double() for k in range(in_features))
    expected = {"none": expected, "add": expected + other, "swish": F.silu(expected)}[op]
    torch.testing.assert_close(got, expected.float(), rtol=1e-5, atol=1e-5)
    # Without a norm the rows are rounded as given; the rounding is torch's (to nearest even).
    plain = native.PackedLinear(weight)(x)
    torch.testing.assert_close(plain, F.linear(x.to(torch.bfloat16).float(), weight.float()), rtol=1e-5, atol=1e-5)


@needs_kernel
@pytest.mark.skipif(
    "avx512_bf16" not in native_build.cpu_flags(), reason="the CPU has no avx512_bf16: the FMA path is the default"
)
def test_bf16_products_without_avx512_bf16_take_the_widening_path(monkeypatch, tmp_path) -> None:
    """Built for a CPU without avx512_bf16 (-mno-avx512bf16), the bf16 kernel widens each pair
    and sums it in FMAs: the same products as vdpbf16ps, up to float32 summation order."""
    generator = torch.Generator().manual_seed(5)
    weight = torch.randn(70, 53, generator=generator).to(torch.bfloat16)
    bias, x = torch.randn(70, generator=generator), torch.randn(9, 53, generator=generator)
    with_dot = native.PackedLinear(weight, bias)(x, "swish")
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("AGENTIC_RL_CACHE", str(tmp_path))
    monkeypatch.setattr(native_build, "FLAGS", (*native_build.FLAGS, "-mno-avx512bf16"))
    assert native.available()
    widened = native.PackedLinear(weight, bias)(x, "swish")
    torch.testing.assert_close(widened, with_dot, rtol=1e-5, atol=1e-5)
    expected = F.silu(F.linear(x.to(torch.bfloat16).float(), weight.float(), bias))
    torch.testing.assert_close(widened, expected, rtol=1e-5, atol=1e-5)


def test_turned_off_or_unbuildable_says_why(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("AGENTIC_RL_NATIVE", "0")
    assert not native.available()
    assert native.unavailable_reason() == "turned off by AGENTIC_RL_NATIVE=0"
    with pytest.raises(RuntimeError, match="not available: turned off"):
        native.PackedLinear(torch.randn(2, 2))
    if not native_build.cpu_flags():
        return  # not Linux: the compiler is never reached
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.delenv("AGENTIC_RL_NATIVE")
    monkeypatch.setenv("AGENTIC_RL_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "false")  # a "compiler" that always fails
    monkeypatch.setattr(native_build, "check_machine", lambda: None)  # reach the build on any CPU
    assert not native.available()
    assert native.unavailable_reason() == "false failed: no output"
    assert not list((tmp_path / "kernels").glob("*.so*"))  # no partial library left behind


@needs_kernel
def test_the_build_is_cached_per_source(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("AGENTIC_RL_CACHE", str(tmp_path))
    first = native_build.build(native_build.compiler())
    assert first.parent == tmp_path / "kernels" and first.name.startswith("native-") and first.suffix == ".so"
    stamp = first.stat().st_mtime_ns
    assert native_build.build(native_build.compiler()) == first and first.stat().st_mtime_ns == stamp  # not rebuilt
    assert [p.name for p in (tmp_path / "kernels").iterdir()] == [first.name]


def test_library_key_follows_source_flags_compiler_and_cpu(monkeypatch, tmp_path) -> None:
    """A cached library is reused only for the same source, flags, compiler version and CPU."""
    compilers = []
    for version in ("1.0", "2.0"):
        script = tmp_path / f"cxx-{version}"
        script.write_text(f"#!/bin/sh\necho 'fake c++ {version}'\n")
        script.chmod(0o755)
        compilers.append(str(script))
    source = tmp_path / "kernel.cpp"
    source.write_text("int f() { return 1; }\n")
    monkeypatch.setattr(native_build, "SOURCE", source)
    monkeypatch.setattr(native_build, "cpu_flags", lambda: "flags : avx512f\n")
    base = native_build.library_key(compilers[0])
    assert len(base) == 16 and native_build.library_key(compilers[0]) == base  # stable
    assert native_build.library_key(compilers[1]) != base  # another compiler version
    with monkeypatch.context() as patch:
        patch.setattr(native_build, "FLAGS", (*native_build.FLAGS, "-DEXTRA"))
        assert native_build.library_key(compilers[0]) != base  # other flags
    with monkeypatch.context() as patch:
        patch.setattr(native_build, "cpu_flags", lambda: "flags : avx512f avx512bw\n")
        assert native_build.library_key(compilers[0]) != base  # another CPU
    assert native_build.library_key(compilers[0]) == base
    source.write_text("int f() { return 2; }\n")
    assert native_build.library_key(compilers[0]) != base  # edited source


@needs_kernel
def test_norm_weight_rms_normalises_the_input_first() -> None:
    x, weight, bias, norm_weight = _tensors((2, 3, 72), (40, 72), (40,), (72,))
    packed = native.PackedLinear(weight, bias, norm_weight=norm_weight, norm_eps=1e-5)
    expected = F.linear(F.rms_norm(x, (72,), norm_weight, 1e-5), weight, bias)
    torch.testing.assert_close(packed(x), expected, rtol=1e-5, atol=1e-5)
    # By hand: x = [3, 4] has mean square 12.5; eps 0 -> x / sqrt(12.5) * [1, 2], then W = I.
    unit = native.PackedLinear(torch.eye(2), norm_weight=torch.tensor([1.0, 2.0]), norm_eps=0.0)
    torch.testing.assert_close(unit(torch.tensor([[3.0, 4.0]])), torch.tensor([[3.0, 8.0]]) / 12.5**0.5)


def _attention_loop(queries, keys, values, lengths):
    """Per row and head, softmax over the first lengths[b] positions, in float64."""
    batch, kv_heads, _, head_dim = keys.shape
    groups = queries.shape[1] // (kv_heads * head_dim)
    out = torch.zeros(batch, queries.shape[1], dtype=torch.float64)
    for b in range(batch):
        for head in range(kv_heads * groups):
            kv = head // groups
            q = queries[b, head * head_dim : (head + 1) * head_dim].double()
            k, v = keys[b, kv, : lengths[b]].double(), values[b, kv, : lengths[b]].double()
            out[b, head * head_dim : (head + 1) * head_dim] = torch.softmax(k @ q, 0) @ v
    return out


@needs_kernel
@pytest.mark.parametrize(("kv_heads", "groups", "head_dim"), [(1, 1, 16), (3, 3, 64), (2, 4, 80), (2, 1, 128)])
def test_decode_attention_matches_a_plain_loop(kv_heads, groups, head_dim) -> None:
    batch, capacity = 5, 40
    generator = torch.Generator().manual_seed(head_dim)
    # A slot cache [slots, kv, capacity, D]: the kernel reads a window of rows 1..5 and positions < 33.
    cache_keys, cache_values = (torch.randn(7, kv_heads, capacity, head_dim, generator=generator) for _ in range(2))
    keys, values = cache_keys[1:6, :, :33], cache_values[1:6, :, :33]
    fused = torch.randn(batch, (kv_heads * groups + 2 * kv_heads) * head_dim, generator=generator)
    queries = fused[:, : kv_heads * groups * head_dim]  # strided rows, as sliced from a q/k/v output
    lengths = torch.tensor([1, 33, 17, 16, 2])
    got = native.decode_attention(queries, keys, values, lengths)
    assert got.shape == (batch, kv_heads * groups * head_dim)
    torch.testing.assert_close(got.double(), _attention_loop(queries, keys, values, lengths), rtol=1e-5, atol=5e-6)
    torch.testing.assert_close(
        got, native._attention_reference(queries, keys, values, lengths), rtol=1e-4, atol=1e-5
    )  # both float32
    # A single position attends only to itself: the output is that value row.
    assert torch.equal(
        got[0].view(kv_heads, groups, head_dim), values[0, :, 0][:, None].expand(kv_heads, groups, head_dim)
    )


@needs_kernel
def test_decode_attention_rejects_bad_input() -> None:
    keys = torch.randn(2, 1, 8, 16)
    with pytest.raises(ValueError, match=r"lengths must be in \[1, 8\], got \[0, 3\]"):
        native.decode_attention(torch.randn(2, 16), keys, keys, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match=r"lengths must be in \[1, 8\], got \[9, 3\]"):
        native.decode_attention(torch.randn(2, 16), keys, keys, torch.tensor([9, 3]))
    with pytest.raises(ValueError, match="D a multiple of 16"):
        native.decode_attention(
            torch.randn(2, 12), torch.randn(2, 1, 8, 12), torch.randn(2, 1, 8, 12), torch.tensor([1, 1])
        )
