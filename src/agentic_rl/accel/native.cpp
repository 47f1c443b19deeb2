// Float32 kernels for decoding on CPUs with AVX-512: the narrow products (y = x W^T + b,
// optionally RMS-normalising x first) and single-token attention over a slot cache.
//
// A decode step multiplies a few rows (one per sequence) by every weight matrix, so it
// is bound by streaming the weights from memory. oneDNN's kernels reach about 24 GB/s
// of weights at 16 rows on the 2-core EPYC machines we develop on; this one reaches
// about 29 GB/s there, and matches oneDNN's compute rate for prefill-sized row counts.
// Built and loaded by accel/native.py (see there for the calling contract).
//
// Layout: W [N, K] is packed into column blocks of NW = 48 outputs, each block stored
// k-major ([K][48], zero-padded past N), so a block is one sequential stream. x is copied
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

// rows x (up to) 48 outputs: panel [K][MR], block [K][NW]; y, other row stride ld.
template <int ROWS>
void tile(const float* __restrict panel, int64_t K, const float* __restrict block, const float* __restrict bias,
          int op, const float* __restrict other, float* __restrict y, int64_t ld, int columns) {
  __m512 acc[ROWS][NV];
  __mmask16 masks[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    masks[v] = columns_mask(columns - 16 * v);
    const __m512 start = bias ? _mm512_maskz_loadu_ps(masks[v], bias + 16 * v) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) acc[r][v] = start;
  }
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

typedef void (*tile_fn)(const float*, int64_t, const float*, const float*, int, const float*, float*, int64_t, int);
const tile_fn tiles[MR + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>, tile<7>, tile<8>};

// Row panels of the calling thread, grown as needed and freed when the thread exits.
struct Scratch {
  float* data = nullptr;
  int64_t size = 0;
  ~Scratch() { free(data); }
};
thread_local Scratch panels;

}  // namespace

extern "C" {

int agentic_rl_native_abi() { return 2; }
int agentic_rl_native_block() { return NW; }

// W [N, K] (row stride ldw) -> packed [ceil(N / NW)][K][NW], zero-padded.
void agentic_rl_native_pack(const float* w, int64_t N, int64_t K, int64_t ldw, float* packed) {
  const int64_t blocks = (N + NW - 1) / NW;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    float* out = packed + b * K * NW;
    for (int64_t j = 0; j < NW; ++j) {
      const int64_t n = b * NW + j;
      for (int64_t k = 0; k < K; ++k) out[k * NW + j] = n < N ? w[n * ldw + k] : 0.0f;
    }
  }
}

// y [M, N] = op(norm(x) [M, K] W^T + bias), x rows contiguous; other [M, N] for add/mul.
// norm: none when norm_weight is null, else x * rsqrt(mean(x^2) + eps) * norm_weight.
// Returns 0, or -1 when the panel scratch cannot be allocated.
int agentic_rl_native_gemm(const float* x, int64_t M, int64_t K, const float* packed, int64_t N, const float* bias,
                           int op, const float* other, float* y, const float* norm_weight, float eps) {
  const int64_t groups = (M + MR - 1) / MR;
  const int64_t need = groups * K * MR;
  if (need > panels.size) {
    free(panels.data);
    panels.data = static_cast<float*>(aligned_alloc(64, ((need * sizeof(float) + 63) / 64) * 64));
    panels.size = panels.data ? need : 0;
    if (!panels.data) return -1;
  }
  float* const scratch = panels.data;  // thread_local: read by the team through this copy
  const int64_t blocks = (N + NW - 1) / NW;
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t g = 0; g < groups; ++g) {
      float* panel = scratch + g * K * MR;
      for (int64_t r = 0; r < MR; ++r) {
        const int64_t row = g * MR + r;
        if (row < M) {
          const float* src = x + row * K;
          if (norm_weight) {
            __m512 squares = _mm512_setzero_ps();
            int64_t k = 0;
            for (; k + 16 <= K; k += 16) {
              const __m512 v = _mm512_loadu_ps(src + k);
              squares = _mm512_fmadd_ps(v, v, squares);
            }
            float sum = _mm512_reduce_add_ps(squares);
            for (; k < K; ++k) sum += src[k] * src[k];
            const float scale = 1.0f / sqrtf(sum / static_cast<float>(K) + eps);
            for (k = 0; k < K; ++k) panel[k * MR + r] = (src[k] * scale) * norm_weight[k];
          } else {
            for (int64_t k = 0; k < K; ++k) panel[k * MR + r] = src[k];
          }
        } else {
          for (int64_t k = 0; k < K; ++k) panel[k * MR + r] = 0.0f;
        }
      }
    }
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int columns = static_cast<int>(N - b * NW < NW ? N - b * NW : NW);
      for (int64_t g = 0; g < groups; ++g) {
        const int rows = static_cast<int>(M - g * MR < MR ? M - g * MR : MR);
        tiles[rows](scratch + g * K * MR, K, packed + b * K * NW, bias ? bias + b * NW : nullptr, op,
                    other ? other + g * MR * N + b * NW : nullptr, y + g * MR * N + b * NW, N, columns);
      }
    }
  }
  return 0;
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
