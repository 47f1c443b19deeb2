// Float32 kernels for decoding on CPUs with AVX-512: the narrow products (y = x W^T + b,
// optionally RMS-normalising x first) and single-token attention over a slot cache.
// The products also take bfloat16 weights: a decode step streams half the bytes; the rows
// are rounded to bf16 (after their norm) and each pair of products is summed into float32
// by one vdpbf16ps where the CPU has avx512_bf16, else by two FMAs on widened values.
//
// A decode step multiplies a few rows (one per sequence) by every weight matrix, so it
// is bound by streaming the weights from memory. oneDNN's kernels reach about 24 GB/s
// of weights at 16 rows on the 2-core EPYC machines we develop on; this one reaches
// about 29 GB/s there, and matches oneDNN's compute rate for prefill-sized row counts.
// Built and loaded by accel/native.py (see there for the calling contract).
//
// Layout: W [N, K] is packed into column blocks of NW = 48 outputs, each block stored
// k-major ([K][48], zero-padded past N), so a block is one sequential stream (in the
// weights' type: float, or bf16 as uint16_t). x is copied
// into panels of MR = 8 rows, k-major ([K][8]), so each k reads one cache line of x.
// A tile of 8 rows x 48 columns keeps 24 accumulators in registers; every output is an
// in-order sum over k (fused multiply-adds), starting from the bias.
// With a norm weight, each row of x is RMS-normalised while it is copied into the panel.
// Threads: the OpenMP runtime torch already loaded (same soname), so torch's thread
// count applies and no second pool spins beside torch's.

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

namespace {

constexpr int NV = 3;        // 16-float vectors per column block
constexpr int NW = 16 * NV;  // outputs per column block
constexpr int MR = 8;        // rows per tile

enum Op { OP_NONE = 0, OP_ADD = 1, OP_MUL = 2, OP_SILU = 3 };

// e^x to about 1 ulp: x = n ln2 + r, |r| <= ln2/2, degree-7 Taylor polynomial in r
// (truncation below 6e-9 relative), then scaled by 2^n. Inputs are clamped to [-104, 89]:
// beyond, the result is already 0 or inf (so SiLU of a huge negative is -0, not garbage).
inline __m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

inline __mmask16 columns_mask(int columns) {
  return columns >= 16 ? (__mmask16)0xFFFF : columns <= 0 ? (__mmask16)0 : (__mmask16)((1u << columns) - 1);
}

// float32 -> bf16, rounding to nearest even (as torch's .to(torch.bfloat16)); NaN stays NaN.
inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float bf16_to_float(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  memcpy(&result, &bits, sizeof(result));
  return result;
}

// Accumulators of a tile start from the bias (zero past the block's valid columns).
template <int ROWS>
inline void start(__m512 (&acc)[ROWS][NV], __mmask16 (&masks)[NV], const float* __restrict bias, int columns) {
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    masks[v] = columns_mask(columns - 16 * v);
    const __m512 first = bias ? _mm512_maskz_loadu_ps(masks[v], bias + 16 * v) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) acc[r][v] = first;
  }
}

// The epilogue: op applied to each sum, stored to y (and other read) with row stride ld.
template <int ROWS>
inline void finish(__m512 (&acc)[ROWS][NV], const __mmask16 (&masks)[NV], int op, const float* __restrict other,
                   float* __restrict y, int64_t ld) {
#pragma GCC unroll 16
  for (int r = 0; r < ROWS; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      __m512 out = acc[r][v];
      const int64_t at = r * ld + 16 * v;
      if (op == OP_ADD) {
        out = _mm512_add_ps(out, _mm512_maskz_loadu_ps(masks[v], other + at));
      } else if (op == OP_MUL) {
        out = _mm512_mul_ps(out, _mm512_maskz_loadu_ps(masks[v], other + at));
      } else if (op == OP_SILU) {
        out = _mm512_div_ps(out, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), out))));
      }
      _mm512_mask_storeu_ps(y + at, masks[v], out);
    }
  }
}

// float32: rows x (up to) 48 outputs; panel [K][MR] floats, block [K][NW] floats.
template <int ROWS>
void tile(const float* __restrict panel, int64_t K, const float* __restrict block, const float* __restrict bias,
          int op, const float* __restrict other, float* __restrict y, int64_t ld, int columns) {
  __m512 acc[ROWS][NV];
  __mmask16 masks[NV];
  start<ROWS>(acc, masks, bias, columns);
  for (int64_t k = 0; k < K; ++k) {
    __m512 w[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) w[v] = _mm512_load_ps(block + k * NW + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) {
      const __m512 xr = _mm512_set1_ps(panel[k * MR + r]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(w[v], xr, acc[r][v]);
    }
  }
  finish<ROWS>(acc, masks, op, other, y, ld);
}

// bf16: panel [P][MR] of bf16 pairs (x[2p] low, x[2p + 1] high), block [P][NW] of weight
// pairs in the same order, P = ceil(K / 2). One vdpbf16ps adds both products of a pair
// to a float32 sum; without avx512_bf16 the pair is widened and added in two FMAs.
template <int ROWS>
void tile(const uint32_t* __restrict panel, int64_t P, const uint16_t* __restrict block,
          const float* __restrict bias, int op, const float* __restrict other, float* __restrict y, int64_t ld,
          int columns) {
  __m512 acc[ROWS][NV];
  __mmask16 masks[NV];
  start<ROWS>(acc, masks, bias, columns);
  for (int64_t p = 0; p < P; ++p) {
    __m512i w[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) w[v] = _mm512_load_si512(block + (p * NW + 16 * v) * 2);
#ifdef __AVX512BF16__
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) {
      const __m512bh xr = (__m512bh)_mm512_set1_epi32(static_cast<int>(panel[p * MR + r]));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)w[v], xr);
    }
#else
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    __m512 even[NV], odd[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      even[v] = _mm512_castsi512_ps(_mm512_slli_epi32(w[v], 16));
      odd[v] = _mm512_castsi512_ps(_mm512_and_si512(w[v], high));
    }
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) {
      const uint32_t pair = panel[p * MR + r];
      const __m512 x0 = _mm512_set1_ps(bf16_to_float(static_cast<uint16_t>(pair)));
      const __m512 x1 = _mm512_set1_ps(bf16_to_float(static_cast<uint16_t>(pair >> 16)));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(odd[v], x1, _mm512_fmadd_ps(even[v], x0, acc[r][v]));
    }
#endif
  }
  finish<ROWS>(acc, masks, op, other, y, ld);
}

// How each weight type is packed and its rows laid into panels: float keeps every k
// (cell = one float), bf16 pairs k (cell = two bf16 in a uint32_t, the rows rounded).
template <typename W>
struct Format;
template <>
struct Format<float> {
  using Cell = float;
  static constexpr int64_t kstep = 1;
  static float cell(const float* values, int64_t k, int64_t) { return values[k]; }
};
template <>
struct Format<uint16_t> {
  using Cell = uint32_t;
  static constexpr int64_t kstep = 2;
  static uint32_t cell(const float* values, int64_t k, int64_t K) {
    return float_to_bf16(values[k]) | (k + 1 < K ? static_cast<uint32_t>(float_to_bf16(values[k + 1])) << 16 : 0u);
  }
};

template <typename C, typename W>
using tile_fn = void (*)(const C*, int64_t, const W*, const float*, int, const float*, float*, int64_t, int);
template <typename C, typename W>
constexpr tile_fn<C, W> tiles[MR + 1] = {nullptr,           tile<1>, tile<2>, tile<3>, tile<4>,
                                         tile<5>,           tile<6>, tile<7>, tile<8>};

// Row panels of the calling thread, grown as needed and freed when the thread exits.
struct Scratch {
  void* data = nullptr;
  int64_t bytes = 0;
  ~Scratch() { free(data); }
};
thread_local Scratch panels;

// The exported pack and gemm below, for float or bf16 (uint16_t) weights: W [N, K] ->
// [ceil(N / NW)][ceil(K / kstep)][NW][kstep], zero-padded.
template <typename W>
void pack(const W* w, int64_t N, int64_t K, int64_t ldw, W* packed) {
  constexpr int64_t step = Format<W>::kstep;
  const int64_t P = (K + step - 1) / step, blocks = (N + NW - 1) / NW;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    W* out = packed + b * P * NW * step;
    for (int64_t j = 0; j < NW; ++j) {
      const int64_t n = b * NW + j;
      for (int64_t p = 0; p < P; ++p) {
        for (int64_t e = 0; e < step; ++e) {
          const int64_t k = p * step + e;
          out[(p * NW + j) * step + e] = n < N && k < K ? w[n * ldw + k] : W(0);
        }
      }
    }
  }
}

template <typename W>
int gemm(const float* x, int64_t M, int64_t K, const W* packed, int64_t N, const float* bias, int op,
         const float* other, float* y, const float* norm_weight, float eps) {
  using F = Format<W>;
  using C = typename F::Cell;
  const int64_t P = (K + F::kstep - 1) / F::kstep, groups = (M + MR - 1) / MR;
  const int64_t need = ((groups * P * MR * static_cast<int64_t>(sizeof(C)) + 63) / 64) * 64;
  if (need > panels.bytes) {
    free(panels.data);
    panels.data = aligned_alloc(64, need);
    panels.bytes = panels.data ? need : 0;
    if (!panels.data) return -1;
  }
  C* const scratch = static_cast<C*>(panels.data);  // thread_local: read by the team through this copy
  const int64_t blocks = (N + NW - 1) / NW;
  int failed = 0;
#pragma omp parallel reduction(| : failed)
  {
    // A normalised row is written here first (the bf16 cells pair neighbouring values).
    float* normed = norm_weight ? static_cast<float*>(aligned_alloc(64, ((K * sizeof(float) + 63) / 64) * 64)) : nullptr;
    failed = norm_weight && !normed;
#pragma omp for schedule(static)
    for (int64_t g = 0; g < groups; ++g) {
      C* panel = scratch + g * P * MR;
      for (int64_t r = 0; r < MR; ++r) {
        const int64_t row = g * MR + r;
        if (row >= M || (norm_weight && !normed)) {
          for (int64_t p = 0; p < P; ++p) panel[p * MR + r] = C(0);
          continue;
        }
        const float* values = x + row * K;
        if (norm_weight) {
          __m512 squares = _mm512_setzero_ps();
          int64_t k = 0;
          for (; k + 16 <= K; k += 16) {
            const __m512 v = _mm512_loadu_ps(values + k);
            squares = _mm512_fmadd_ps(v, v, squares);
          }
          float sum = _mm512_reduce_add_ps(squares);
          for (; k < K; ++k) sum += values[k] * values[k];
          const float scale = 1.0f / sqrtf(sum / static_cast<float>(K) + eps);
          for (k = 0; k < K; ++k) normed[k] = (values[k] * scale) * norm_weight[k];
          values = normed;
        }
        for (int64_t p = 0; p < P; ++p) panel[p * MR + r] = F::cell(values, p * F::kstep, K);
      }
    }
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int columns = static_cast<int>(N - b * NW < NW ? N - b * NW : NW);
      for (int64_t g = 0; g < groups; ++g) {
        const int rows = static_cast<int>(M - g * MR < MR ? M - g * MR : MR);
        tiles<C, W>[rows](scratch + g * P * MR, P, packed + b * P * NW * F::kstep, bias ? bias + b * NW : nullptr, op,
                          other ? other + g * MR * N + b * NW : nullptr, y + g * MR * N + b * NW, N, columns);
      }
    }
    free(normed);
  }
  return failed ? -1 : 0;
}

}  // namespace

extern "C" {

int agentic_rl_native_abi() { return 3; }
int agentic_rl_native_block() { return NW; }

// W [N, K] (row stride ldw) -> packed [ceil(N / NW)][K][NW], zero-padded; float or bf16 weights.
void agentic_rl_native_pack(const float* w, int64_t N, int64_t K, int64_t ldw, float* packed) {
  pack(w, N, K, ldw, packed);
}
void agentic_rl_native_pack_bf16(const uint16_t* w, int64_t N, int64_t K, int64_t ldw, uint16_t* packed) {
  pack(w, N, K, ldw, packed);
}

// y [M, N] = op(norm(x) [M, K] W^T + bias), x rows contiguous; other [M, N] for add/mul.
// norm: none when norm_weight is null, else x * rsqrt(mean(x^2) + eps) * norm_weight.
// Returns 0, or -1 when the panel scratch cannot be allocated.
int agentic_rl_native_gemm(const float* x, int64_t M, int64_t K, const float* packed, int64_t N, const float* bias,
                           int op, const float* other, float* y, const float* norm_weight, float eps) {
  return gemm(x, M, K, packed, N, bias, op, other, y, norm_weight, eps);
}
int agentic_rl_native_gemm_bf16(const float* x, int64_t M, int64_t K, const uint16_t* packed, int64_t N,
                                const float* bias, int op, const float* other, float* y, const float* norm_weight,
                                float eps) {
  return gemm(x, M, K, packed, N, bias, op, other, y, norm_weight, eps);
}

// Single-token attention for B rows over a slot cache, with grouped-query heads.
// q [B, heads * D] (row stride q_stride; head kv * groups + g at column (kv * groups + g) * D,
// already scaled); keys/values of row b, kv head h: rows of D floats at
// keys + b * slot_stride + h * head_stride, the first lengths[b] of them valid.
// out [B, heads * D] contiguous: softmax(q k^T) v per head. D a multiple of 16.
// Returns 0; -1 when scratch cannot be allocated; -2 when a length is outside [1, capacity].
int agentic_rl_native_decode_attention(const float* q, int64_t q_stride, const float* keys, const float* values,
                                       int64_t slot_stride, int64_t head_stride, const int64_t* lengths, int64_t capacity,
                                       int64_t B, int64_t kv_heads, int64_t groups, int64_t D, float* out) {
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b) {
    if (lengths[b] < 1 || lengths[b] > capacity) return -2;
    longest = lengths[b] > longest ? lengths[b] : longest;
  }
  const int64_t width = (longest + 15) / 16 * 16;
  int failed = 0;
#pragma omp parallel reduction(| : failed)
  {
    float* scores = static_cast<float*>(aligned_alloc(64, groups * width * sizeof(float) + 64));
    if (!scores) {
      failed = 1;
    } else {
#pragma omp for schedule(static)
      for (int64_t item = 0; item < B * kv_heads; ++item) {
        const int64_t b = item / kv_heads, h = item % kv_heads, length = lengths[b];
        const float* key_rows = keys + b * slot_stride + h * head_stride;
        const float* value_rows = values + b * slot_stride + h * head_stride;
        const float* queries = q + b * q_stride + h * groups * D;
        float* attended = out + b * kv_heads * groups * D + h * groups * D;
        for (int64_t g = 0; g < groups; ++g) {
          const float* query = queries + g * D;
          float* row = scores + g * width;
          float top = -INFINITY;
          for (int64_t l = 0; l < length; ++l) {
            const float* key = key_rows + l * D;
            __m512 dot = _mm512_setzero_ps();
            for (int64_t d = 0; d < D; d += 16) dot = _mm512_fmadd_ps(_mm512_loadu_ps(query + d), _mm512_loadu_ps(key + d), dot);
            row[l] = _mm512_reduce_add_ps(dot);
            top = row[l] > top ? row[l] : top;
          }
          __m512 total = _mm512_setzero_ps();
          for (int64_t l = 0; l < length; l += 16) {
            const __mmask16 mask = columns_mask(static_cast<int>(length - l));
            const __m512 p = _mm512_maskz_mov_ps(mask, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, row + l), _mm512_set1_ps(top))));
            _mm512_mask_storeu_ps(row + l, mask, p);
            total = _mm512_add_ps(total, p);
          }
          const float inverse = 1.0f / _mm512_reduce_add_ps(total);
          // Up to 64 columns of the output per pass over the values, in independent accumulators.
          for (int64_t d0 = 0; d0 < D; d0 += 64) {
            const int vectors = static_cast<int>(D - d0 >= 64 ? 4 : (D - d0) / 16);
            __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
            for (int64_t l = 0; l < length; ++l) {
              const __m512 p = _mm512_set1_ps(row[l]);
              const float* value = value_rows + l * D + d0;
              for (int v = 0; v < vectors; ++v) acc[v] = _mm512_fmadd_ps(p, _mm512_loadu_ps(value + 16 * v), acc[v]);
            }
            for (int v = 0; v < vectors; ++v) _mm512_storeu_ps(attended + g * D + d0 + 16 * v, _mm512_mul_ps(acc[v], _mm512_set1_ps(inverse)));
          }
        }
      }
      free(scores);
    }
  }
  return failed ? -1 : 0;
}

}  // extern "C"
