// CPU implementation of the verify (docs/math.md, docs/modes.md), with the short conv fused in when VerifyParams::conv
// has one (docs/conv.md), compiled once per instruction set (kernels/cpu_isa.h).
// The element arithmetic is kernels/kda_math.h's, with its multiply-adds spelled as the set's fmadd and
// its sums over K as explicit vectors (kernels/cpu_simd.h): every mode, folded records and new tokens,
// runs the same instructions in the same order and agrees bitwise.
#include <cstring>

#include "kernels/cpu_isa.h"
#include "kernels/kda_math.h"
#include "kernels/verify.h"

KDAGRAPH_CPU_ISA_BEGIN
#include "kernels/cpu_simd.h"

namespace {

using math::bf16;

// The io dtype is a run-time choice here: its conversions are per token, outside the state loop, and a
// third io dtype would otherwise compile the verify again for every state dtype and instruction set.
float io_value(DType t, const void* base, int64_t i) { return math::load_as_f32(base, t, i); }

// State rows one pass of the token loop carries together: their sums are independent chains the core
// overlaps. A row's arithmetic does not depend on the group it is in.
constexpr int kRowGroup = 4;
// A head is split into blocks of V rows only until every thread has this many units of work.
constexpr int64_t kUnitsPerThread = 4;
constexpr int32_t kMinBlockRows = 16;

// One unit of work: V rows [first_v, end_v) of value head `head` of batch row `row`.
struct Unit {
  int32_t row, head, first_v, end_v;
};

// The units of a call: every (row, head) whole, or cut into blocks of V rows when rows x HV alone
// would leave threads without work (batch 1 at few heads, many threads).
struct UnitGrid {
  int32_t blocks = 1, block_rows = 0;
  int64_t units = 0;

  UnitGrid(const VerifyParams& p, int threads) {
    const int64_t heads = int64_t(p.rows) * p.value_heads;
    const int32_t max_blocks = p.head_v / kMinBlockRows > 1 ? p.head_v / kMinBlockRows : 1;
    while (blocks < max_blocks && heads * blocks < kUnitsPerThread * threads) blocks *= 2;
    block_rows = (p.head_v + blocks - 1) / blocks;
    block_rows = (block_rows + kRowGroup - 1) / kRowGroup * kRowGroup;
    blocks = (p.head_v + block_rows - 1) / block_rows;
    units = heads * blocks;
  }
  Unit unit(const VerifyParams& p, int64_t u) const {
    const int64_t head = u / blocks;
    const int32_t first = int32_t(u % blocks) * block_rows;
    return Unit{int32_t(head / p.value_heads), int32_t(head % p.value_heads), first,
                first + block_rows < p.head_v ? first + block_rows : p.head_v};
  }
};

// A thread's working buffers for one unit, carved from its cpu_thread_scratch: the key-side vectors of
// the unit's U tokens (and each new token's k . q) and one group of state rows, kp = padded_lanes(K) floats each (zeros beyond K),
// the scratch row of each new token's post-state, and with the conv fused its outputs for the new tokens
// (conv_head's q [T][K], k [T][K], v [T][V], in the io dtype). With a token tree (docs/trees.md), also the
// checked parent of each new token and the state of a row group before the first new token and after
// each one, in fp32: a token whose parent is not the token before it starts from its parent's.
struct UnitScratch {
  int64_t kp;
  float *q, *k, *a, *beta, *kq, *rows;
  void* conv;
  int32_t* write_row;
  float* kept = nullptr;     // [T + 1][kRowGroup][kp] with a tree
  int32_t* parent = nullptr; // [T] with a tree
  int32_t* keeps = nullptr;  // [T + 1] with a tree: whether a later token branches from state j (tree_branch_points)

  static int64_t conv_floats(const VerifyParams& p) {
    return p.conv.width > 0 ? padded_lanes(int32_t(int64_t(p.tokens) * (2 * p.head_k + p.head_v))) : 0;
  }
  static int64_t kept_floats(const VerifyParams& p) {
    return p.parent != nullptr ? (int64_t(p.tokens) + 1) * kRowGroup * padded_lanes(p.head_k) : 0;
  }
  static size_t bytes(const VerifyParams& p) {
    const int64_t tokens = int64_t(p.tokens) + p.ring_records;
    const int64_t floats = (3 * tokens + kRowGroup) * padded_lanes(p.head_k) + 2 * padded_lanes(int32_t(tokens)) +
                           conv_floats(p) + kept_floats(p);
    return size_t(floats) * sizeof(float) + size_t(p.tokens) * sizeof(int32_t) +
           (p.parent != nullptr ? size_t(2 * p.tokens + 1) * sizeof(int32_t) : 0);
  }
  UnitScratch(void* base, const VerifyParams& p) : kp(padded_lanes(p.head_k)) {
    const int64_t tokens = int64_t(p.tokens) + p.ring_records;
    rows = static_cast<float*>(base);  // 64-byte aligned, and every vector a multiple of 64 bytes
    q = rows + kRowGroup * kp;
    k = q + tokens * kp;
    a = k + tokens * kp;
    beta = a + tokens * kp;
    kq = beta + padded_lanes(int32_t(tokens));
    float* conv_base = kq + padded_lanes(int32_t(tokens));
    conv = conv_base;
    float* kept_base = conv_base + conv_floats(p);
    if (p.parent != nullptr) kept = kept_base;
    write_row = reinterpret_cast<int32_t*>(kept_base + kept_floats(p));
    if (p.parent != nullptr) {
      parent = write_row + p.tokens;
      keeps = parent + p.tokens;
    }
  }
};

// Where token u's inputs of one (row, head) are: the first `replay` tokens are the pending records of
// the ring (k and g in the kg row, u in the u row), the rest the layer's inputs (with the conv fused: q,
// k and v in the conv's buffer). q is null for records, which produce no output, and u for new tokens;
// o_off is where a new token's output goes.
struct TokenSource {
  const void* q = nullptr;
  const void* k;
  const void* v = nullptr;
  const void* g;
  const void* beta = nullptr;
  DType gate_dtype;          // of g and beta: the io dtype's, or fp32 beside 16-bit io (VerifyParams::gate_f32)
  const float* u = nullptr;  // a record's u of the head's V rows
  int64_t q_off = 0, k_off, v_off = 0, g_off, beta_off = 0, o_off = 0;
};

struct UnitTokens {
  const VerifyParams& p;
  const VerifyRow& r;
  char* ring_kg;   // the slot's ring rows of this layer, or null
  float* ring_u;
  RingLayout ring;
  int32_t n, h, hq;
  const void* conv_qkv;  // conv_head's buffer when the conv is fused, else null

  // The ring record of token u: pending ones first, then the new tokens'.
  int32_t record(int32_t u) const { return ring_record(r.ring_start, u, ring.records); }

  TokenSource source(int32_t u) const {
    TokenSource src;
    if (u < r.replay) {
      src.k = src.g = ring_kg;
      src.gate_dtype = p.io_dtype;
      src.k_off = ring.k_offset(record(u), hq);
      src.g_off = ring.g_offset(record(u), h);
      src.u = ring_u + ring.u_offset(record(u), h);
      return src;
    }
    const int64_t t = u - r.replay, tok = int64_t(n) * p.tokens + t;
    src.q = p.q;
    src.k = p.k;
    src.v = p.v;
    src.g = p.g;
    src.beta = p.beta;
    src.gate_dtype = p.gate_f32 ? DType::f32 : p.io_dtype;
    src.q_off = q_offset(p, n, t, hq);
    src.k_off = k_offset(p, n, t, hq);
    src.v_off = v_offset(p, n, t, h);
    src.o_off = (tok * p.value_heads + h) * p.head_v;
    src.g_off = (tok * p.value_heads + h) * p.head_k;
    src.beta_off = tok * p.value_heads + h;
    if (conv_qkv != nullptr) {  // q, k and v of new token t from the conv
      const int64_t T = p.tokens;
      src.q = src.k = src.v = conv_qkv;
      src.q_off = t * p.head_k;
      src.k_off = T * p.head_k + t * p.head_k;
      src.v_off = 2 * T * p.head_k + t * p.head_v;
    }
    return src;
  }
};

// A q or k vector in fp32, zero-padded to kp, L2-normalized when the options say so, times `scale`.
void load_and_normalize(const VerifyParams& p, const void* src, int64_t offset, float scale, float* dst, int64_t kp) {
  for (int32_t i = 0; i < p.head_k; ++i) dst[i] = io_value(p.io_dtype, src, offset + i);
  for (int64_t i = p.head_k; i < kp; ++i) dst[i] = 0.0f;
  Vec sum_sq = zero();
  for (int64_t c = 0; c < kp; c += kLanes) sum_sq = fmadd(load(dst + c), load(dst + c), sum_sq);
  const float mult = math::qk_multiplier(p.options.l2norm_qk, reduce_add(sum_sq), scale);
  if (mult == 1.0f) return;
  for (int64_t c = 0; c < kp; c += kLanes) store(dst + c, mul(load(dst + c), set1(mult)));
}

// [TAG_UPDATE_ORDER] One token's update of R state rows, kp floats apart from `s`, in the CUDA kernels'
// formula (OutputFormula::decayed_state, kernels/verify_update.cuh): one pass sums p = sum S' k and, for
// a new token (q given), sum S' q over the decayed state S' = a S; then u = beta (v - p), S = S' + k u,
// and o = sum S' q + u (k . q), with kq = k . q.
template <int R>
void update_rows(float* s, int64_t kp, const float* k, const float* a, float beta, const float (&v)[R],
                 const float* q, float kq, float (&o)[R], float (&u)[R]) {
  Vec proj[R], qproj[R];
  for (int r = 0; r < R; ++r) proj[r] = qproj[r] = zero();
  for (int64_t c = 0; c < kp; c += kLanes) {
    const Vec kc = load(k + c), ac = load(a + c);
    for (int r = 0; r < R; ++r) {
      const Vec decayed = mul(ac, load(s + r * kp + c));
      store(s + r * kp + c, decayed);
      proj[r] = fmadd(decayed, kc, proj[r]);
      if (q != nullptr) qproj[r] = fmadd(decayed, load(q + c), qproj[r]);
    }
  }
  Vec delta[R];
  for (int r = 0; r < R; ++r) {
    u[r] = math::delta(beta, v[r], reduce_add(proj[r]));
    delta[r] = set1(u[r]);
  }
  for (int64_t c = 0; c < kp; c += kLanes) {
    const Vec kc = load(k + c);
    for (int r = 0; r < R; ++r) store(s + r * kp + c, fmadd(kc, delta[r], load(s + r * kp + c)));
  }
  if (q == nullptr) return;
  for (int r = 0; r < R; ++r) o[r] = math::fmadd(u[r], kq, reduce_add(qproj[r]));
}

// [TAG_UPDATE_ORDER] One record folded into R state rows (docs/modes.md replay): S = a S, then S = S + k u
// with the u the verify computed, element by element the arithmetic update_rows runs, with no sums.
template <int R>
void fold_rows(float* s, int64_t kp, const float* k, const float* a, const float* u) {
  Vec delta[R];
  for (int r = 0; r < R; ++r) delta[r] = set1(u[r]);
  for (int64_t c = 0; c < kp; c += kLanes) {
    const Vec kc = load(k + c), ac = load(a + c);
    for (int r = 0; r < R; ++r) store(s + r * kp + c, fmadd(kc, delta[r], mul(ac, load(s + r * kp + c))));
  }
}

// k . q of a new token's normalized vectors (zeros past K), summed as the vectors' own sums are.
float dot(const float* k, const float* q, int64_t kp) {
  Vec acc = zero();
  for (int64_t c = 0; c < kp; c += kLanes) acc = fmadd(load(k + c), load(q + c), acc);
  return reduce_add(acc);
}

// R state rows (K apart in memory) into the working rows, in fp32, zeros beyond K.
template <class StateT>
void load_rows(float* s, int64_t kp, const StateT* src, int32_t K, int R) {
  for (int r = 0; r < R; ++r) {
    for (int32_t i = 0; i < K; ++i) s[r * kp + i] = math::to_f32(src[int64_t(r) * K + i]);
    for (int64_t i = K; i < kp; ++i) s[r * kp + i] = 0.0f;
  }
}

// The working rows out to R state rows in the state dtype, rounded as `draws` say (docs/low_precision.md; `row0`:
// the first row's V index in the head, for the draws' element index); past the cache when `streaming`
// and the rows are whole aligned vectors (wide ones where their alignment allows). `keep`: the working
// rows become the values stored (a flush goes on from the state as it reads back).
template <class StateT>
void store_rows(StateT* dst, float* s, int64_t kp, int32_t K, int R, bool streaming, const math::StoreDraws& draws,
                int32_t row0, bool keep = false) {
  if constexpr (sizeof(StateT) == sizeof(float)) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(dst);
    if (streaming && K % kLanes == 0 && address % (kLanes * sizeof(float)) == 0) {
      for (int r = 0; r < R; ++r)
        for (int32_t c = 0; c < K; c += kLanes) stream(dst + int64_t(r) * K + c, load(s + r * kp + c));
      return;
    }
    if (streaming && K % 4 == 0 && address % 16 == 0) {
      for (int r = 0; r < R; ++r)
        for (int32_t c = 0; c < K; c += 4) stream4(dst + int64_t(r) * K + c, s + r * kp + c);
      return;
    }
  }
  if constexpr (sizeof(StateT) == sizeof(float)) {
    for (int r = 0; r < R; ++r)
      for (int32_t i = 0; i < K; ++i) dst[int64_t(r) * K + i] = s[r * kp + i];
  } else {
    uint32_t random[4] = {0, 0, 0, 0};
    uint32_t drawn = UINT32_MAX;  // the element group `random` holds
    for (int r = 0; r < R; ++r)
      for (int32_t i = 0; i < K; ++i) {
        const uint32_t e = uint32_t(row0 + r) * uint32_t(K) + uint32_t(i);
        if (draws.stochastic && e / 4 != drawn) draws.draw4(drawn = e / 4, random);
        const StateT x = math::round_state<StateT>(s[r * kp + i], draws.stochastic, random[e % 4]);
        dst[int64_t(r) * K + i] = x;
        if (keep) s[r * kp + i] = math::to_f32(x);
      }
  }
}

// What the rows of one unit share: its seed, where its post-states and folded state go, its tokens.
template <class StateT>
struct UnitRows {
  const StateT* seed;    // head h of the seed
  StateT* writeback;     // head h of the checkpoint when the round flushes, else null
  char* scratch;         // the layer's scratch base
  UnitTokens tokens;
  int32_t count;         // U: folded records, then new tokens
  math::StoreDraws draws;  // of the row's stores to this head (row_store_draws)
};

// Rows [j, j + R) of a unit through all its tokens. Each row is read whole before any post-state row
// is written: the seed may be a scratch row this verify overwrites (docs/modes.md).
template <int R, class StateT>
void verify_rows(const VerifyParams& p, const UnitRows<StateT>& u, const UnitScratch& w, int32_t j, bool streaming) {
  const int32_t K = p.head_k, replay = u.tokens.r.replay;
  const int64_t head_elems = int64_t(K) * p.head_v;
  load_rows(w.rows, w.kp, u.seed + int64_t(j) * K, K, R);
  const int64_t group_floats = R * w.kp;
  auto kept = [&](int32_t i) { return w.kept + i * kRowGroup * w.kp; };  // i = new token + 1, 0: its seed
  for (int32_t t = 0; t < u.count; ++t) {
    if (w.parent != nullptr && t >= replay) {  // a tree: keep the seed of the new tokens, or branch
      const int32_t parent = w.parent[t - replay];
      if (t == replay && w.keeps[0]) std::memcpy(kept(0), w.rows, size_t(group_floats) * sizeof(float));
      else if (parent != t - replay - 1) std::memcpy(w.rows, kept(parent + 1), size_t(group_floats) * sizeof(float));
    }
    const TokenSource src = u.tokens.source(t);
    if (t < replay) {
      fold_rows<R>(w.rows, w.kp, w.k + t * w.kp, w.a + t * w.kp, src.u + j);
      if (t == replay - 1 && u.writeback != nullptr)  // a flush: the checkpoint holds it from now on
        store_rows(u.writeback + int64_t(j) * K, w.rows, w.kp, K, R, false, for_store(u.draws, flush_store(p)), j, true);
      continue;
    }
    float v[R], out[R], du[R];
    for (int r = 0; r < R; ++r) v[r] = io_value(p.io_dtype, src.v, src.v_off + j + r);
    update_rows<R>(w.rows, w.kp, w.k + t * w.kp, w.a + t * w.kp, w.beta[t], v, w.q + t * w.kp, w.kq[t], out, du);
    for (int r = 0; r < R; ++r) math::store_from_f32(p.o, p.io_dtype, src.o_off + j + r, out[r]);
    if (u.tokens.r.records) {  // the new token's record: its u of these rows
      float* record_u = u.tokens.ring_u + u.tokens.ring.u_offset(u.tokens.record(t), u.tokens.h);
      for (int r = 0; r < R; ++r) record_u[j + r] = du[r];
    }
    if (w.parent != nullptr && w.keeps[t - replay + 1])
      std::memcpy(kept(t - replay + 1), w.rows, size_t(group_floats) * sizeof(float));
    const int32_t write_row = w.write_row[t - replay];
    if (write_row < 0) continue;
    StateT* post = reinterpret_cast<StateT*>(state_row(u.scratch, p.scratch, write_row)) + u.tokens.h * head_elems;
    store_rows(post + int64_t(j) * K, w.rows, w.kp, K, R, streaming, for_store(u.draws, uint32_t(t - replay)), j);
  }
}

// The fused conv of one unit (docs/conv.md): the q and k channels of its query/key head and the v channels
// of its V rows, for the T new tokens, into w.conv (q [T][K], k [T][K], v [T][V]). The first unit of the
// first value head of a group writes the history of the q and k channels, every unit its v channels'.
template <class IoT>
const void* conv_head(const VerifyParams& p, const ConvRow& r, const Unit& unit, const UnitScratch& w) {
  const int32_t K = p.head_k, V = p.head_v, T = p.tokens, HK = p.heads * K, G = p.value_heads / p.heads;
  const int32_t n = unit.row, h = unit.head, hq = h / G;
  IoT* q = static_cast<IoT*>(w.conv);
  IoT* k = q + int64_t(T) * K;
  IoT* v = k + int64_t(T) * K;
  const bool owns_qk = h % G == 0 && unit.first_v == 0;
  for (int32_t i = 0; i < K; ++i) {
    conv_channel_into_width<IoT>(p.conv, r, n, hq * K + i, q + i, K, owns_qk);
    conv_channel_into_width<IoT>(p.conv, r, n, HK + hq * K + i, k + i, K, owns_qk);
  }
  for (int32_t j = unit.first_v; j < unit.end_v; ++j)
    conv_channel_into_width<IoT>(p.conv, r, n, 2 * HK + h * V + j, v + j, V, true);
  return q;
}

// The bytes of state and ring records a unit reads and writes (VerifyParams::bytes_moved): its seed
// rows, its post-state rows, the folded records (their k and g, and u of its rows), the checkpoint on a
// flush, and its records' u (the head's first unit: their k and g too, k by the group's first head).
template <class StateT>
int64_t unit_bytes(const VerifyParams& p, const VerifyRow& r, const Unit& unit, const UnitScratch& w) {
  const int64_t rows = unit.end_v - unit.first_v, state = rows * p.head_k * int64_t(sizeof(StateT));
  const int64_t kg = int64_t(p.head_k) * int64_t(dtype_size(p.io_dtype));
  int64_t posts = 0;
  for (int32_t t = 0; t < p.tokens; ++t) posts += w.write_row[t] >= 0;
  int64_t bytes = state * (1 + posts + (r.flush ? 1 : 0)) + r.replay * (2 * kg + rows * int64_t(sizeof(float)));
  if (r.records) {
    bytes += int64_t(p.tokens) * rows * int64_t(sizeof(float));
    if (unit.first_v == 0) bytes += int64_t(p.tokens) * kg * (unit.head % (p.value_heads / p.heads) == 0 ? 2 : 1);
  }
  return bytes;
}

// One unit: its tokens' key-side vectors once, then its V rows, a group at a time, through all tokens:
// a group stays in L1 across the T tokens, and the state moves once in and T times out, as on the GPU.
// conv_head in the io dtype.
const void* conv_head_io(const VerifyParams& p, const ConvRow& r, const Unit& unit, const UnitScratch& w) {
  switch (p.io_dtype) {
    case DType::f32: return conv_head<float>(p, r, unit, w);
    case DType::bf16: return conv_head<bf16>(p, r, unit, w);
    case DType::f16: return conv_head<math::f16>(p, r, unit, w);
  }
  return nullptr;
}

template <class StateT>
void verify_unit(const VerifyParams& p, const Unit& unit, const UnitScratch& w, bool streaming) {
  const int32_t K = p.head_k, T = p.tokens, HV = p.value_heads, n = unit.row, h = unit.head;
  const int32_t hq = h / (HV / p.heads);
  const int64_t head_elems = int64_t(K) * p.head_v;
  const bool reports = h == 0 && unit.first_v == 0;  // one unit per row records the row's errors

  const VerifyRow r = verify_row(p, n, reports);
  const VerifyBases b = r.padded() ? VerifyBases{} : verify_bases(p, r, n, reports);
  const bool fused = p.conv.width > 0;
  const ConvRow conv = fused && !r.padded() && b.ok ? conv_row(p.conv, n, reports) : ConvRow{};
  if (r.padded() || !b.ok || (fused && conv.padded())) {  // padded row: zeros out, nothing read, no state written
    for (int32_t t = 0; t < T; ++t) {
      const int64_t out = ((int64_t(n) * T + t) * HV + h) * p.head_v;
      for (int32_t j = unit.first_v; j < unit.end_v; ++j) math::store_from_f32(p.o, p.io_dtype, out + j, 0.0f);
    }
    return;
  }
  const bool ring = r.replay > 0 || r.records;
  const UnitRows<StateT> rows{
      verify_seed<StateT>(p, r, b) + h * head_elems,
      r.flush ? reinterpret_cast<StateT*>(state_row(b.pool, p.pool, r.seed_pool)) + h * head_elems : nullptr,
      b.scratch,
      UnitTokens{p, r, ring ? state_row(b.ring_kg, p.ring_kg, r.seed_pool) : nullptr,
                 ring ? reinterpret_cast<float*>(state_row(b.ring_u, p.ring_u, r.seed_pool)) : nullptr,
                 RingLayout{p.ring_records, p.heads, HV, K, p.head_v}, n, h, hq,
                 fused ? conv_head_io(p, conv, unit, w) : nullptr},
      r.replay + T, row_store_draws(p, n, h)};

  const float q_scale = math::query_scale(p.options, K);
  const int32_t gh = gate_head(p, h);
  const float a_log = p.A_log ? p.A_log[gh] : 0.0f;
  for (int32_t t = 0; t < rows.count; ++t) {
    const TokenSource src = rows.tokens.source(t);
    float* a = w.a + t * w.kp;
    load_and_normalize(p, src.k, src.k_off, 1.0f, w.k + t * w.kp, w.kp);
    w.kq[t] = 0.0f;
    if (src.q != nullptr) {
      load_and_normalize(p, src.q, src.q_off, q_scale, w.q + t * w.kp, w.kp);
      w.kq[t] = dot(w.k + t * w.kp, w.q + t * w.kp, w.kp);
    }
    for (int32_t i = 0; i < K; ++i) {
      const float dt = p.dt_bias ? p.dt_bias[int64_t(gh) * K + i] : 0.0f;
      a[i] = math::decay_factor(math::log_decay(p.options, io_value(src.gate_dtype, src.g, src.g_off + i), a_log, dt));
    }
    for (int64_t i = K; i < w.kp; ++i) a[i] = 0.0f;
    w.beta[t] = src.beta != nullptr ? math::beta_value(p.options, io_value(src.gate_dtype, src.beta, src.beta_off)) : 0.0f;
  }
  for (int32_t t = 0; t < T; ++t) w.write_row[t] = post_state_row(p, n, t, reports);
  if (w.parent != nullptr) {  // the states a later token branches from are kept aside: a chain keeps none
    for (int32_t t = 0; t <= T; ++t) w.keeps[t] = 0;
    for (int32_t t = 0; t < T; ++t) {
      w.parent[t] = checked_parent(p.parent + int64_t(n) * T, t, n, p.errors, reports);
      if (w.parent[t] != t - 1) w.keeps[w.parent[t] + 1] = 1;
    }
  }

  int32_t j = unit.first_v;
  for (; j + kRowGroup <= unit.end_v; j += kRowGroup) verify_rows<kRowGroup, StateT>(p, rows, w, j, streaming);
  for (; j < unit.end_v; ++j) verify_rows<1, StateT>(p, rows, w, j, streaming);
  if (streaming) stream_fence();
  if (p.bytes_moved != nullptr) count_bytes(p.bytes_moved, unit_bytes<StateT>(p, r, unit, w));

  if (!r.records || unit.first_v != 0) return;
  // The new tokens' k and g, as given (fused: k as the conv made it), into their records: by the first
  // unit of the head, and k, which the G value heads of query head hq share, by that of the first.
  const UnitTokens& tok = rows.tokens;
  // g is in the io dtype here: a ring refuses fp32 gates beside 16-bit io (VerifyParams::gate_f32).
  const int64_t es = int64_t(dtype_size(p.io_dtype));
  for (int32_t t = 0; t < T; ++t) {
    const TokenSource src = tok.source(r.replay + t);
    const int32_t record = tok.record(r.replay + t);
    if (h % (HV / p.heads) == 0)
      std::memcpy(tok.ring_kg + tok.ring.k_offset(record, hq) * es, static_cast<const char*>(src.k) + src.k_off * es,
                  size_t(K * es));
    std::memcpy(tok.ring_kg + tok.ring.g_offset(record, h) * es, static_cast<const char*>(src.g) + src.g_off * es,
                size_t(K * es));
  }
}

template <class StateT>
void verify_all(const VerifyParams& p) {
  const int threads = cpu_threads();
  const UnitGrid grid(p, threads);
  const int64_t post_bytes =
      p.writes_scratch ? int64_t(p.rows) * p.tokens * p.value_heads * p.head_v * p.head_k * int64_t(sizeof(StateT)) : 0;
  const bool streaming = post_bytes > cpu_streaming_store_bytes();
  const size_t scratch_bytes = UnitScratch::bytes(p);
#pragma omp parallel num_threads(threads)
  {
    const UnitScratch w(cpu_thread_scratch(scratch_bytes), p);
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < grid.units; ++u) verify_unit<StateT>(p, grid.unit(p, u), w, streaming);
  }
}

}  // namespace

void verify_cpu(const VerifyParams& p) {
  switch (p.pool.dtype) {
    case DType::f32: return verify_all<float>(p);
    case DType::bf16: return verify_all<bf16>(p);
    case DType::f16: return verify_all<math::f16>(p);
  }
}

KDAGRAPH_CPU_ISA_END
