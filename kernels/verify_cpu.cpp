// CPU implementation of the verify (SPEC §1, §3), with the short conv fused in when VerifyParams::conv
// has one (SPEC §9). The element arithmetic is kernels/kda_math.h (and kernels/conv.h), shared with the
// CUDA kernel; the sums over K run in a fixed order per build, so every mode agrees bitwise.
#include <algorithm>
#include <cstring>
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

// Per-token vectors are this many floats apart (K rounded up to 64 bytes), from a 64-byte aligned base:
// every token's vectors then sit at the same alignment, so a replayed token runs the very instructions it
// ran when it was new (a vectorized sum's order may depend on alignment).
int64_t token_stride(int32_t K) { return (int64_t(K) + 15) / 16 * 16; }

// Working buffers of one thread: the key-side vectors of one (row, head) for up to `tokens` tokens, and
// one state row.
struct UnitScratch {
  int64_t stride;
  std::vector<float> storage;
  float *q, *k, *a, *beta, *row;
  UnitScratch(int32_t K, int32_t tokens) : stride(token_stride(K)) {
    const int64_t vec = stride * tokens;
    storage.resize(size_t(4 * vec + tokens + stride + 16));
    float* base = storage.data();
    base += (16 - reinterpret_cast<uintptr_t>(base) / sizeof(float) % 16) % 16;
    q = base;
    k = q + vec;
    a = k + vec;
    row = a + vec;
    beta = row + stride;
  }
};

// The functions holding a sum over K are never inlined: one compiled body serves every caller, so a
// replayed token sums in the order it did as a new token (an optimizer may otherwise duplicate a loop
// body, e.g. when splitting the token loop at the replay boundary, and vectorize the copies apart).
template <class IoT>
[[gnu::noinline]] void load_and_normalize(const VerifyParams& p, const void* src, int64_t offset, float scale, float* dst) {
  float sum_sq = 0.0f;
  for (int32_t i = 0; i < p.head_k; ++i) {
    dst[i] = load<IoT>(src, offset + i);
    sum_sq = math::accumulate(sum_sq, dst[i], dst[i]);
  }
  const float mult = math::qk_multiplier(p.options.l2norm_qk, sum_sq, scale);
  if (mult != 1.0f)
    for (int32_t i = 0; i < p.head_k; ++i) dst[i] *= mult;
}

// [TAG_UPDATE_ORDER] One token's update of one state row: S' = a*S; p = sum S'k; u = beta (v - p);
// S = S' + k u.
[[gnu::noinline]] void update_row(float* s, const float* k, const float* a, float beta, float v, int32_t K) {
  float proj = 0.0f;
#pragma omp simd reduction(+ : proj)
  for (int32_t i = 0; i < K; ++i) {
    s[i] = math::decayed(s[i], a[i]);
    proj = math::accumulate(proj, s[i], k[i]);
  }
  const float delta = math::delta(beta, v, proj);
#pragma omp simd
  for (int32_t i = 0; i < K; ++i) s[i] = math::rank1_update(s[i], k[i], delta);
}

// o = sum S q over one state row.
[[gnu::noinline]] float output_of_row(const float* s, const float* q, int32_t K) {
  float out = 0.0f;
#pragma omp simd reduction(+ : out)
  for (int32_t i = 0; i < K; ++i) out = math::accumulate(out, s[i], q[i]);
  return out;
}

// Where token u's inputs of one (row, head) are: the first `replay` tokens in the cache row, the rest in
// the layer's inputs (fused: q, k and v in the conv's buffer). q is null for cached tokens, which
// produce no output; o_off is where a new token's output goes.
struct TokenSource {
  const void* q = nullptr;
  const void* k;
  const void* v;
  const void* g;
  const void* beta;
  int64_t q_off = 0, k_off, v_off, g_off, beta_off, o_off = 0;
};

// The fused conv of one (row, value head) (SPEC §9): the q and k channels of its query/key head and its
// own v channels for the T new tokens, as q [T][K], k [T][K], v [T][V] in a buffer of this thread that
// only grows (a call allocates nothing once warm). The first value head of a group writes the history
// of the q and k channels, every head its v channels'.
template <class IoT>
const IoT* conv_head(const VerifyParams& p, const ConvRow& r, int32_t n, int32_t h) {
  thread_local std::vector<IoT> buffer;
  const int32_t K = p.head_k, V = p.head_v, T = p.tokens, HK = p.heads * K, hq = h / (p.value_heads / p.heads);
  buffer.resize(std::max(buffer.size(), size_t(T) * size_t(2 * K + V)));
  IoT* q = buffer.data();
  IoT* k = q + int64_t(T) * K;
  IoT* v = k + int64_t(T) * K;
  const bool owns_qk = h % (p.value_heads / p.heads) == 0;
  for (int32_t i = 0; i < K; ++i) {
    conv_channel_into_width<IoT>(p.conv, r, n, hq * K + i, q + i, K, owns_qk);
    conv_channel_into_width<IoT>(p.conv, r, n, HK + hq * K + i, k + i, K, owns_qk);
  }
  for (int32_t j = 0; j < V; ++j) conv_channel_into_width<IoT>(p.conv, r, n, 2 * HK + h * V + j, v + j, V, true);
  return buffer.data();
}

// One (row, value head). Value rows j of the state never mix (p[j], u[j] and o[j] read only row j), so
// each state row runs through all its tokens while it sits in L1, and the state moves once in and T
// times out, as on the GPU. Each row is read before any post-state row is written: the seed may be a
// scratch row this verify overwrites (SPEC §3).
template <class IoT, class StateT>
void verify_unit(const VerifyParams& p, int32_t n, int32_t h, UnitScratch& w) {
  const int32_t K = p.head_k, V = p.head_v, T = p.tokens, HV = p.value_heads;
  const int32_t G = HV / p.heads, hq = h / G;
  const int64_t head_elems = int64_t(K) * V;
  IoT* o = static_cast<IoT*>(p.o);

  const VerifyRow r = verify_row(p, n, h == 0);
  const VerifyBases b = r.padded() ? VerifyBases{} : verify_bases(p, r, n, h == 0);
  const bool fused = p.conv.width > 0;
  const ConvRow conv = fused && !r.padded() && b.ok ? conv_row(p.conv, n, h == 0) : ConvRow{};
  if (r.padded() || !b.ok || (fused && conv.padded())) {  // padded row: zeros out, nothing read, no state written
    for (int32_t t = 0; t < T; ++t) {
      IoT* out = o + ((int64_t(n) * T + t) * HV + h) * V;
      for (int32_t j = 0; j < V; ++j) out[j] = math::from_f32<IoT>(0.0f);
    }
    return;
  }
  const StateT* seed = verify_seed<StateT>(p, r, b) + h * head_elems;
  StateT* writeback = r.replay > 0 ? reinterpret_cast<StateT*>(state_row(b.pool, p.pool, r.seed_pool)) + h * head_elems
                                   : nullptr;

  const TokenCacheLayout cache{p.cache_tokens, p.heads, HV, K, V};
  const IoT* conv_qkv = fused ? conv_head<IoT>(p, conv, n, h) : nullptr;
  const int32_t U = r.replay + T;  // the token list: cached accepted tokens, then the new ones
  auto source = [&](int32_t u) {
    TokenSource src;
    if (u < r.replay) {
      const char* row = state_row(b.cache, p.token_cache, r.replay_from);
      src.k = src.v = src.g = src.beta = row;
      src.k_off = cache.k_offset(u, hq);
      src.v_off = cache.v_offset(u, h);
      src.g_off = cache.g_offset(u, h);
      src.beta_off = cache.beta_offset(u, h);
      return src;
    }
    const int64_t tok = int64_t(n) * T + (u - r.replay);
    src.q = p.q;
    src.k = p.k;
    src.v = p.v;
    src.g = p.g;
    src.beta = p.beta;
    src.q_off = src.k_off = (tok * p.heads + hq) * K;
    src.v_off = src.o_off = (tok * HV + h) * V;
    src.g_off = (tok * HV + h) * K;
    src.beta_off = tok * HV + h;
    if (fused) {  // q, k and v of new token t from the conv
      const int64_t t = u - r.replay;
      src.q = src.k = src.v = conv_qkv;
      src.q_off = t * K;
      src.k_off = int64_t(T) * K + t * K;
      src.v_off = 2 * int64_t(T) * K + t * V;
    }
    return src;
  };

  const float q_scale = math::query_scale(p.options, K);
  const float a_log = p.A_log ? p.A_log[h] : 0.0f;
  for (int32_t u = 0; u < U; ++u) {
    const TokenSource src = source(u);
    if (src.q != nullptr) load_and_normalize<IoT>(p, src.q, src.q_off, q_scale, w.q + u * w.stride);
    load_and_normalize<IoT>(p, src.k, src.k_off, 1.0f, w.k + u * w.stride);
    for (int32_t i = 0; i < K; ++i) {
      const float dt = p.dt_bias ? p.dt_bias[int64_t(h) * K + i] : 0.0f;
      w.a[u * w.stride + i] = math::decay_factor(math::log_decay(p.options, load<IoT>(src.g, src.g_off + i), a_log, dt));
    }
    w.beta[u] = math::beta_value(p.options, load<IoT>(src.beta, src.beta_off));
  }

  float* s = w.row;
  for (int32_t j = 0; j < V; ++j) {
    for (int32_t i = 0; i < K; ++i) s[i] = math::to_f32(seed[int64_t(j) * K + i]);
    for (int32_t u = 0; u < U; ++u) {
      const TokenSource src = source(u);
      update_row(s, w.k + u * w.stride, w.a + u * w.stride, w.beta[u], load<IoT>(src.v, src.v_off + j), K);
      if (u < r.replay) {
        if (u == r.replay - 1) {  // the accepted prefix is applied: the pool holds it from now on
          StateT* dst = writeback + int64_t(j) * K;
          for (int32_t i = 0; i < K; ++i) {
            dst[i] = math::from_f32<StateT>(s[i]);
            s[i] = stored_value<StateT>(s[i]);
          }
        }
        continue;
      }
      o[src.o_off + j] = math::from_f32<IoT>(output_of_row(s, w.q + u * w.stride, K));
      const int32_t write_row = post_state_row(p, n, u - r.replay, h == 0 && j == 0);
      if (write_row < 0) continue;
      StateT* post = reinterpret_cast<StateT*>(state_row(b.scratch, p.scratch, write_row)) + h * head_elems;
      for (int32_t i = 0; i < K; ++i) post[int64_t(j) * K + i] = math::from_f32<StateT>(s[i]);
    }
  }

  if (r.cache_to < 0) return;
  // The new tokens' inputs, as given, for the next round's replay. k is shared by the G value heads of
  // query head hq: its first value head writes it.
  char* row = state_row(b.cache, p.token_cache, r.cache_to);
  IoT* dst = reinterpret_cast<IoT*>(row);
  for (int32_t t = 0; t < T; ++t) {
    const TokenSource src = source(r.replay + t);
    auto copy = [&](const void* from, int64_t from_off, int64_t to_off, int32_t count) {
      std::memcpy(dst + to_off, static_cast<const IoT*>(from) + from_off, size_t(count) * sizeof(IoT));
    };
    if (h % G == 0) copy(src.k, src.k_off, cache.k_offset(t, hq), K);
    copy(src.v, src.v_off, cache.v_offset(t, h), V);
    copy(src.g, src.g_off, cache.g_offset(t, h), K);
    copy(src.beta, src.beta_off, cache.beta_offset(t, h), 1);
  }
}

template <class IoT, class StateT>
void verify_all(const VerifyParams& p) {
  const int64_t units = int64_t(p.rows) * p.value_heads;
#pragma omp parallel
  {
    UnitScratch w(p.head_k, p.tokens + p.cache_tokens);
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
