// kdagraph: plain value types shared by every public header. No device code; compiles with any C++17
// compiler, with or without the CUDA toolkit.
#pragma once

#include <cstddef>
#include <cstdint>

// The CUDA runtime spells cudaStream_t this way too; repeating the typedef keeps CUDA headers out of
// the public API.
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace kdagraph {

// Element types of inputs, outputs and state (f16: IEEE binary16).
enum class DType : int32_t { f32 = 0, bf16 = 1, f16 = 2 };
inline constexpr size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }
const char* to_string(DType t);

// docs/low_precision.md: how a store of the recurrent state rounds fp32 to a 16-bit state dtype. nearest: to nearest
// even. stochastic: up or down with the probabilities that keep the expected value, from counter-based
// random bits keyed by the slot's seed (SlotStorage::rounding_seed). An fp32 state is stored exactly.
enum class Rounding : int32_t { nearest = 0, stochastic = 1 };
const char* to_string(Rounding r);

enum class Backend : int32_t { cpu = 0, cuda = 1 };
const char* to_string(Backend b);
// True when the library was built with CUDA and a device is visible.
bool cuda_available();

// How the recurrent state advances from one round to the next (docs/modes.md).
enum class Mode : int32_t { two_phase = 0, fused_accept = 1, replay = 2 };
const char* to_string(Mode m);

// What a mode needs, decided in one place. A new mode is one more case in mode_policy; every switch
// over Mode has no default, so the compiler lists each place a new mode must touch.
struct ModePolicy {
  bool per_token_scratch = false;  // verify writes the post-state of token t to scratch row slot*S + t
  bool seed_from_scratch = false;  // accept_len a >= 1 names the seed: scratch row slot*S + a - 1
  bool accept_sets_slot = false;   // accept writes accept_len[slot]; otherwise a per-row record
  bool commit = false;             // a commit copies the accepted post-state into the pool, every layer
  // A checkpoint a slot and a ring of (k, g, u) records (docs/modes.md replay): verify folds the pending
  // records into the checkpoint first and appends the new tokens' records; accept moves the cursor.
  bool ring = false;
  // The short convolution's window (docs/conv.md): at column max(a - 1, 0) of the conv state, advanced in
  // place; otherwise at column 0, each token's window to a conv scratch and the commit copies one back.
  bool conv_offset_window = false;
};

constexpr ModePolicy mode_policy(Mode m) {
  switch (m) {
    case Mode::two_phase: return ModePolicy{true, false, false, true, false, false};
    case Mode::fused_accept: return ModePolicy{true, true, true, false, false, true};
    case Mode::replay: return ModePolicy{false, false, true, false, true, true};
  }
  return ModePolicy{};  // not a Mode: needs nothing, and validation refuses it
}

// State-sized transfers per round, layer and value head (docs/shapes.md), at most: what a benchmark divides
// by its time. two-phase: 1 + T in verify and 2 in the commit; fused-accept: 1 + T; replay: the
// checkpoint read, and its write on a flush round (records come on top, ReplayRing).
constexpr int64_t state_transfers_per_round(Mode m, int32_t tokens) {
  switch (m) {
    case Mode::two_phase: return 1 + int64_t(tokens) + 2;
    case Mode::fused_accept: return 1 + int64_t(tokens);
    case Mode::replay: return 2;
  }
  return 0;
}

// Replay's corrections ring (docs/modes.md): R records a slot, layer and head; a verify writes its folded
// state back to the checkpoint (a flush) when the slot's pending records number at least flush_min, or
// when the ring could not hold another round's (pending + T > R - T). 2T <= R, 0 <= flush_min <= R - T.
struct ReplayRing {
  int32_t records = 0;    // R; 0 in a config: the default, 3 T
  int32_t flush_min = -1; // -1 in a config: the default, T + 1 (0: flush every round)
};

// docs/math.md, gate in kernel.
enum class GateMode : int32_t {
  precomputed = 0,   // g is the log decay itself
  softplus = 1,      // g = -exp(A_log[h]) * softplus(x + dt_bias)
  lower_bound = 2,   // g = lb * sigmoid(exp(A_log[h]) * (x + dt_bias))
};

// Per-layer preprocessing switches of docs/math.md.
struct VerifyOptions {
  bool l2norm_qk = false;
  bool use_scale = true;
  float scale = 0.0f;  // 0 means 1 / sqrt(K)
  GateMode gate = GateMode::precomputed;
  float gate_lower_bound = -5.0f;  // lb < 0, used by GateMode::lower_bound
  bool beta_is_logit = false;
  // flash-linear-attention's allow_neg_eigval: a logit's beta is 2 sigmoid(x), in (0, 2), so I - beta k k^T
  // may have a negative eigenvalue. A beta given as a value is taken as it is.
  bool beta_neg_eigval = false;
};

// Element strides of one input by batch row, token and head; its last dimension is contiguous. 0: the
// compact layout's. A view split from one fused projection (SGLang's qkv) has larger row and token strides.
struct InputStrides {
  int64_t row = 0, token = 0, head = 0;
};

// docs/conv.md: the short convolution's activation.
enum class ConvActivation : int32_t { silu = 0, none = 1 };

// The causal depthwise convolution before each KDA layer's update (docs/conv.md). width 0: the layers have
// none (the recurrent part alone).
struct ConvShape {
  int32_t channels = 0;  // C = 2 * H * K + HV * V at a KDA layer
  int32_t width = 0;     // W, 2 to 4 (Kimi-Linear: 4); 0: no conv
  ConvActivation activation = ConvActivation::silu;
};

// Head geometry of the KDA layers of one model (one tensor-parallel rank).
struct ModelShape {
  int32_t layers = 0;       // L, KDA layers only
  int32_t heads = 0;        // H, query/key heads
  int32_t value_heads = 0;  // HV, a multiple of H
  int32_t head_k = 0;       // K
  int32_t head_v = 0;       // V
};

// C of a KDA layer's conv: its q, k and v projections concatenated, 2 * H * K + HV * V.
inline int32_t conv_channels(const ModelShape& m) {
  return 2 * m.heads * m.head_k + m.value_heads * m.head_v;
}

// State storage of docs/storage.md.
struct PoolShape {
  int32_t slots = 0;          // P
  int32_t scratch_steps = 0;  // S, >= tokens per round
  DType state_dtype = DType::f32;            // of pool, scratch and replay's checkpoint: f32, bf16 or f16
  Rounding rounding = Rounding::nearest;     // of every store of a state to state_dtype (docs/low_precision.md)
};

// A stream to enqueue on. On the CPU backend work runs at once (or is recorded into a CPU graph
// while one is being captured); `stream` is ignored there.
struct Stream {
  Backend backend = Backend::cpu;
  cudaStream_t stream = nullptr;
};

}  // namespace kdagraph
