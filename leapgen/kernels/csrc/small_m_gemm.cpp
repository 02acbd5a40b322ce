// Small-M fp32 GEMM for CPU decoding steps: y[M, N] = x[M, K] @ W[K, N], AVX2 + FMA.
//
// A decode or verification step multiplies a few rows (M = 1 for AR, the draft window plus one
// for speculative verification) by every weight matrix of the model. At that size the cost is
// reading the weights: MKL's sgemm repacks W for every call once M > 1, so verifying 5 tokens cost
// about twice one token. Here W is packed once, at load time, into panels of 8 output columns,
// [N/8][K][8], and each panel is streamed exactly once per call for up to MR_MAX rows: one weight
// read feeds M fused multiply-adds.
//
// Every output element is one FMA chain over k = 0..K-1 in order, whatever M, the row's position
// in the batch, the panel grouping or the thread count: a row's result is bit-identical whether it
// is computed alone or with others (batch invariance; what makes a verified token's logits equal to
// the same token's logits in a one-token step).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <algorithm>
#include <type_traits>

namespace {

constexpr int MR_MAX = 6;  // rows per pass: MR x NV accumulators + NV weight vectors + 1 broadcast <= 16 ymm

template <int MR, int NV, bool PREFETCH>
inline void panel_group(const float* __restrict x, int64_t K, const float* __restrict w, float* __restrict y,
                        int64_t ldy) {
  __m256 acc[MR][NV];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[m][v] = _mm256_setzero_ps();
  const int64_t stride = K * 8;  // floats between two panels
  for (int64_t k = 0; k < K; ++k) {
    __m256 wv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      if (PREFETCH) _mm_prefetch(reinterpret_cast<const char*>(w + v * stride + (k + 32) * 8), _MM_HINT_T0);
      wv[v] = _mm256_loadu_ps(w + v * stride + k * 8);
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const __m256 xv = _mm256_broadcast_ss(x + m * K + k);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm256_fmadd_ps(xv, wv[v], acc[m][v]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(y + m * ldy + v * 8, acc[m][v]);
}

// rows [0, MR) of x against panels [p0, p1) (p1 - p0 a multiple of NV, or the tail done one by one)
template <int MR, int NV, bool PREFETCH>
void rows(const float* x, int64_t K, const float* w, int64_t panels, float* y, int64_t ldy) {
  const int64_t groups = panels / NV;
  at::parallel_for(0, groups, 16, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g)
      panel_group<MR, NV, PREFETCH>(x, K, w + g * NV * K * 8, y + g * NV * 8, ldy);
  });
  for (int64_t p = groups * NV; p < panels; ++p) panel_group<MR, 1, PREFETCH>(x, K, w + p * K * 8, y + p * 8, ldy);
}

// All M rows against each group of NV panels in turn, in blocks of RB rows: the group is read from
// memory by the first block and from cache by the others (for M = 3, 4, 7, 8 about 15 % faster
// than streaming every panel once per block of up to MR_MAX rows; ad hoc, the 17M text target).
template <int RB, int NV>
void panel_outer(const float* x, int64_t M, int64_t K, const float* w, int64_t panels, float* y, int64_t ldy) {
  const int64_t groups = panels / NV;
  auto group = [&](const float* wg, float* yg, auto nv_tag) {
    constexpr int nv = decltype(nv_tag)::value;
    int64_t m0 = 0;
    for (; m0 + RB <= M; m0 += RB) panel_group<RB, nv, false>(x + m0 * K, K, wg, yg + m0 * ldy, ldy);
    for (; m0 < M; ++m0) panel_group<1, nv, false>(x + m0 * K, K, wg, yg + m0 * ldy, ldy);
  };
  at::parallel_for(0, groups, 16, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) group(w + g * NV * K * 8, y + g * NV * 8, std::integral_constant<int, NV>{});
  });
  for (int64_t p = groups * NV; p < panels; ++p) group(w + p * K * 8, y + p * 8, std::integral_constant<int, 1>{});
}

}  // namespace

// x: [M, K] float32 contiguous; packed: [P, K, 8] float32 contiguous (P = ceil(N / 8), zero-padded).
// Returns [M, P * 8]; the caller slices the first N columns.
torch::Tensor small_m_gemm(torch::Tensor x, torch::Tensor packed) {
  TORCH_CHECK(x.dim() == 2 && packed.dim() == 3 && packed.size(2) == 8, "small_m_gemm: x [M, K], packed [P, K, 8]");
  TORCH_CHECK(x.scalar_type() == at::kFloat && packed.scalar_type() == at::kFloat, "small_m_gemm: float32 only");
  TORCH_CHECK(x.is_contiguous() && packed.is_contiguous(), "small_m_gemm: contiguous inputs only");
  TORCH_CHECK(x.size(1) == packed.size(1), "small_m_gemm: x has K = ", x.size(1), ", the weights ", packed.size(1));
  const int64_t M = x.size(0), K = x.size(1), P = packed.size(0), N = P * 8;
  auto y = torch::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = packed.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  if (M == 2 || M == 3 || M == 4 || M == 7 || M == 8) {  // measured faster there (see panel_outer)
    panel_outer<2, 6>(xp, M, K, wp, P, yp, N);
    return y;
  }
  for (int64_t m0 = 0; m0 < M; m0 += MR_MAX) {
    const int64_t mr = std::min<int64_t>(MR_MAX, M - m0);
    const float* xm = xp + m0 * K;
    float* ym = yp + m0 * N;
    switch (mr) {
      case 1: rows<1, 6, false>(xm, K, wp, P, ym, N); break;
      case 2: rows<2, 4, false>(xm, K, wp, P, ym, N); break;
      case 3: rows<3, 3, true>(xm, K, wp, P, ym, N); break;
      case 4: rows<4, 3, true>(xm, K, wp, P, ym, N); break;
      case 5: rows<5, 2, true>(xm, K, wp, P, ym, N); break;
      default: rows<6, 2, true>(xm, K, wp, P, ym, N); break;
    }
  }
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("small_m_gemm", &small_m_gemm, "y = x @ W for a few rows, W packed in panels of 8 columns");
}
