// CPU implementation of the verify (SPEC §1). The element arithmetic is kernels/kda_math.h, shared with
// the CUDA kernel; the sums over K run in a fixed order per build, so every mode agrees bitwise.
#include <vector>

#include "kernels/kda_math.h"
#include "kernels/verify.h"

namespace kdagraph {
namespace {

using math::bf16;

template <class T>
float load(const void* base, int64_t i) {
  return math::to_f32(static_cast<const T*>(base)[i]);
}

// Working buffers of one thread: the per-token key-side vectors of one (row, head), and one state row.
struct UnitScratch {
  std::vector<float> q, k, a, beta, row;
  UnitScratch(int32_t K, int32_t T) : q(size_t(K) * T), k(size_t(K) * T), a(size_t(K) * T), beta(size_t(T)), row(size_t(K)) {}
};

template <class IoT>
void load_and_normalize(const VerifyParams& p, const void* src, int64_t offset, float scale,
                        float* dst) {
  float sum_sq = 0.0f;
  for (int32_t i = 0; i < p.head_k; ++i) {
    dst[i] = load<IoT>(src, offset + i);
    sum_sq = math::accumulate(sum_sq, dst[i], dst[i]);
  }
  const float mult = math::qk_multiplier(p.options.l2norm_qk, sum_sq, scale);
  if (mult != 1.0f)
    for (int32_t i = 0; i < p.head_k; ++i) dst[i] *= mult;
}

// One (row, value head). Value rows j of the state never mix (p[j], u[j] and o[j] read only row j), so
// each state row runs through all T tokens while it sits in L1, and the state moves once in and T
// times out, as on the GPU. Each row is read before any post-state row is written: the seed may be a
// scratch row this verify overwrites (SPEC §3).
template <class IoT, class StateT>
void verify_unit(const VerifyParams& p, int32_t n, int32_t h, UnitScratch& w) {
  const int32_t K = p.head_k, V = p.head_v, T = p.tokens;
  const int32_t hq = h / (p.value_heads / p.heads);
  const int64_t head_elems = int64_t(K) * V;
  IoT* o = static_cast<IoT*>(p.o);

  const StateT* seed = verify_seed<StateT>(p, n, h == 0);
  if (seed == nullptr) {  // padded row
    for (int32_t t = 0; t < T; ++t) {
      IoT* out = o + ((int64_t(n) * T + t) * p.value_heads + h) * V;
      for (int32_t j = 0; j < V; ++j) out[j] = math::from_f32<IoT>(0.0f);
    }
    return;
  }
  seed += h * head_elems;
  char* const scratch = layer_base(p.scratch, p.layer);  // checked by verify_seed

  const float q_scale = math::query_scale(p.options, K);
  const float a_log = p.A_log ? p.A_log[h] : 0.0f;
  for (int32_t t = 0; t < T; ++t) {
    const int64_t tok = int64_t(n) * T + t;
    const int64_t qk_off = (tok * p.heads + hq) * K;
    load_and_normalize<IoT>(p, p.q, qk_off, q_scale, w.q.data() + int64_t(t) * K);
    load_and_normalize<IoT>(p, p.k, qk_off, 1.0f, w.k.data() + int64_t(t) * K);
    const int64_t g_off = (tok * p.value_heads + h) * K;
    for (int32_t i = 0; i < K; ++i) {
      const float dt = p.dt_bias ? p.dt_bias[int64_t(h) * K + i] : 0.0f;
      w.a[int64_t(t) * K + i] = math::decay_factor(math::log_decay(p.options, load<IoT>(p.g, g_off + i), a_log, dt));
    }
    w.beta[size_t(t)] = math::beta_value(p.options, load<IoT>(p.beta, tok * p.value_heads + h));
  }

  float* s = w.row.data();
  for (int32_t j = 0; j < V; ++j) {
    for (int32_t i = 0; i < K; ++i) s[i] = math::to_f32(seed[int64_t(j) * K + i]);
    for (int32_t t = 0; t < T; ++t) {
      const int64_t tok = int64_t(n) * T + t;
      const float* kk = w.k.data() + int64_t(t) * K;
      const float* qq = w.q.data() + int64_t(t) * K;
      const float* aa = w.a.data() + int64_t(t) * K;
      float proj = 0.0f;
#pragma omp simd reduction(+ : proj)
      for (int32_t i = 0; i < K; ++i) {
        s[i] = math::decayed(s[i], aa[i]);
        proj = math::accumulate(proj, s[i], kk[i]);
      }
      const int64_t v_off = (tok * p.value_heads + h) * V;
      const float u = math::delta(w.beta[size_t(t)], load<IoT>(p.v, v_off + j), proj);
      float out = 0.0f;
#pragma omp simd reduction(+ : out)
      for (int32_t i = 0; i < K; ++i) {
        s[i] = math::rank1_update(s[i], kk[i], u);
        out = math::accumulate(out, s[i], qq[i]);
      }
      o[v_off + j] = math::from_f32<IoT>(out);
      const int32_t write_row = p.write_row[tok];
      if (write_row < 0) continue;
      StateT* post = reinterpret_cast<StateT*>(state_row(scratch, p.scratch, write_row)) + h * head_elems;
      for (int32_t i = 0; i < K; ++i) post[int64_t(j) * K + i] = math::from_f32<StateT>(s[i]);
    }
  }
}

template <class IoT, class StateT>
void verify_all(const VerifyParams& p) {
  const int64_t units = int64_t(p.rows) * p.value_heads;
#pragma omp parallel
  {
    UnitScratch w(p.head_k, p.tokens);
#pragma omp for schedule(static)
    for (int64_t u = 0; u < units; ++u)
      verify_unit<IoT, StateT>(p, int32_t(u / p.value_heads), int32_t(u % p.value_heads), w);
  }
}

}  // namespace

void verify_cpu(const VerifyParams& p) {
  const bool io_f32 = p.io_dtype == DType::f32, st_f32 = p.pool.dtype == DType::f32;
  if (io_f32 && st_f32) verify_all<float, float>(p);
  else if (io_f32) verify_all<float, bf16>(p);
  else if (st_f32) verify_all<bf16, float>(p);
  else verify_all<bf16, bf16>(p);
}

}  // namespace kdagraph
