#include "tools/engine_options.h"

#include <cstdio>

#include "kdagraph/graph_runner.hpp"
#include "kernels/layout.h"

namespace kdagraph::cli {

const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      {"tiny", ModelShape{2, 2, 4, 64, 64}, "a small model for quick runs and tests; K = V = 64 also runs on the GPU"},
      {"kimi-linear-48b", ModelShape{20, 32, 32, 128, 128}, "Kimi-Linear-48B-A3B: its 20 KDA layers"},
      {"kimi-linear-48b-tp2", ModelShape{20, 16, 16, 128, 128}, "the same at tensor parallel 2 (one rank)"},
      {"kimi-k3-tp8", ModelShape{69, 12, 12, 128, 128},
       "Kimi-K3: its 69 KDA layers at tensor parallel 8 (one rank), 7 draft tokens (DSpark or MTP)", 7, 4},
  };
  return kPresets;
}

const std::vector<std::string> kModeNames = {"two-phase", "fused-accept", "replay"};
const std::vector<std::string> kExecNames = {"eager", "graph"};
const std::vector<std::string> kDTypeNames = {"f32", "bf16", "f16"};

namespace {

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : presets()) names.push_back(p.name);
  return names;
}

// "L=69 H=12 HV=12 K=128 V=128, T=8, conv W=4 over C=4608"
std::string preset_text(const Preset& p) {
  std::string out = describe(p.model);
  if (p.draft >= 0) out += ", T=" + std::to_string(p.draft + 1);
  if (p.conv_width > 0)
    out += ", conv W=" + std::to_string(p.conv_width) + " over C=" + std::to_string(conv_channels(p.model));
  return out;
}

}  // namespace

const Preset& find_preset(const std::string& name) {
  for (const Preset& p : presets())
    if (name == p.name) return p;
  throw UsageError("--preset: '" + name + "' is not one of: " + join(preset_names(), ", "));
}

ModelShape ModelOptions::shape() const {
  const Preset& p = find_preset(preset);
  ModelShape m = p.model;
  if (layers) m.layers = layers;
  if (heads) {
    m.value_heads = heads * (p.model.value_heads / p.model.heads);  // keep the preset's grouping
    m.heads = heads;
  }
  if (value_heads) m.value_heads = value_heads;
  if (head_dim) m.head_k = m.head_v = head_dim;
  if (m.value_heads % m.heads != 0)
    throw UsageError("--value-heads: " + std::to_string(m.value_heads) + " is not a multiple of the " +
                     std::to_string(m.heads) + " query/key heads (--heads)");
  return m;
}

void add_model_options(OptionTable& t, ModelOptions& m) {
  std::string preset_help = "model shape:";
  for (const Preset& p : presets())
    preset_help += std::string(" ") + p.name + " (" + preset_text(p) + "; " + p.what + "),";
  preset_help.back() = ';';
  preset_help += " default tiny; the draft and conv options override a preset's T and conv";
  t.value("preset", "NAME", preset_help, [&m](const std::string&, const std::string& v) {
    find_preset(v);
    m.preset = v;
  });
  t.value("layers", "L", "KDA layers (overrides the preset)",
          [&m](const std::string& o, const std::string& v) { m.layers = int32_t(parse_int(o, v, 1, 256)); });
  t.value("heads", "H", "query/key heads; value heads keep the preset's grouping unless --value-heads",
          [&m](const std::string& o, const std::string& v) { m.heads = int32_t(parse_int(o, v, 1, 256)); });
  t.value("value-heads", "HV", "value heads, a multiple of H",
          [&m](const std::string& o, const std::string& v) { m.value_heads = int32_t(parse_int(o, v, 1, 256)); });
  t.value("head-dim", "D", "K = V = D (the GPU supports 64 and 128)",
          [&m](const std::string& o, const std::string& v) { m.head_dim = int32_t(parse_int(o, v, 1, 512)); });
  t.value("dtype", "f32|bf16|f16", "dtype of the per-layer inputs and outputs (default f32)",
          [&m](const std::string& o, const std::string& v) { m.io = DType(parse_choice(o, v, kDTypeNames)); });
  t.value("state-dtype", "f32|bf16|f16", "dtype the recurrent state is stored in (default f32)",
          [&m](const std::string& o, const std::string& v) { m.state = DType(parse_choice(o, v, kDTypeNames)); });
}

void add_backend_option(OptionTable& t, BackendChoice& choice) {
  t.value("backend", "auto|cpu|cuda", "where to run; auto picks CUDA when a device is visible (default auto)",
          [&choice](const std::string& o, const std::string& v) {
            choice = BackendChoice(parse_choice(o, v, {"auto", "cpu", "cuda"}));
          });
}

Backend resolve_backend(BackendChoice choice) {
  const bool cuda = cuda_available();
  if (choice == BackendChoice::cuda && !cuda) {
#if defined(KDAGRAPH_WITH_CUDA)
    throw UsageError("--backend: cuda was asked for but no CUDA device is visible");
#else
    throw UsageError("--backend: cuda was asked for but this build has no CUDA backend");
#endif
  }
  if (choice == BackendChoice::automatic && !cuda) {
#if defined(KDAGRAPH_WITH_CUDA)
    std::fputs("kdagraph: no CUDA device is visible; running on the CPU backend\n", stderr);
#else
    std::fputs("kdagraph: built without CUDA; running on the CPU backend\n", stderr);
#endif
  }
  if (choice == BackendChoice::cpu) return Backend::cpu;
  return cuda ? Backend::cuda : Backend::cpu;
}

HostEngineConfig engine_config(const EngineSetup& e) {
  HostEngineConfig c;
  VerifierConfig& v = c.verifier;
  v.backend = e.backend;
  v.model = e.model;
  v.pool = PoolShape{e.slots > 0 ? e.slots : 2 * e.batch, e.tokens, e.state};
  v.max_rows = e.batch;
  v.tokens = e.tokens;
  v.io_dtype = e.io;
  v.mode = e.mode;
  v.options.l2norm_qk = true;
  v.options.gate = GateMode::softplus;
  v.options.beta_is_logit = true;
  if (e.conv_width > 0) v.conv = ConvShape{conv_channels(e.model), e.conv_width, ConvActivation::silu};
  v.fuse_conv = e.fuse_conv;
  v.pdl = e.pdl;
  v.ring = e.ring;
  v.count_bytes = e.count_bytes;
  c.runner.buckets = e.buckets.empty() ? default_buckets(e.batch) : e.buckets;
  c.runner.exec = e.exec;
  c.runner.sampler_in_graph = e.sampler_in_graph;
  c.batch = e.batch;
  c.accept_rate = e.accept_rate;
  c.seed = e.seed;
  c.retire_rate = e.retire_rate;
  c.vary_batch = e.vary_batch;
  c.keep_outputs = e.keep_outputs;
  c.tree = e.tree;
  v.trees = e.tree > 0;
  return c;
}

void add_tree_option(OptionTable& t, int32_t& tree) {
  t.value("tree", "K",
          "token trees (docs/trees.md): each round's T tokens form a tree of at most K children a node, and the "
          "sampler accepts a random root-to-node path; 1 is a chain given as a tree (default: chains)",
          [&tree](const std::string& n, const std::string& v) { tree = int32_t(parse_int(n, v, 1, 64)); });
}

ModeFootprint mode_footprint(const VerifierConfig& v) {
  const ModePolicy policy = mode_policy(v.mode);
  const int64_t L = v.model.layers, es = int64_t(dtype_size(v.pool.state_dtype));
  const int64_t state = int64_t(v.model.value_heads) * v.model.head_v * v.model.head_k;
  const int64_t row_bytes = aligned_row_elems(state, v.pool.state_dtype) * es;
  ModeFootprint f;
  f.transfers = state_transfers_per_round(v.mode, v.tokens);
  f.state_bytes_per_row = double(state * es) * double(f.transfers) * double(L);
  f.pool_bytes_per_slot = L * row_bytes;
  if (policy.per_token_scratch) f.scratch_bytes_per_slot = L * v.pool.scratch_steps * row_bytes;
  if (policy.ring) {
    const RoundSpec spec = round_spec(v);
    const int64_t io = int64_t(dtype_size(v.io_dtype));
    f.ring_bytes_per_slot = L * (aligned_row_elems(ring_kg_row_elems(spec), v.io_dtype) * io +
                                 aligned_row_elems(ring_u_row_elems(spec), DType::f32) * int64_t(sizeof(float)));
  }
  if (v.conv.width > 0) {
    const RoundSpec spec = round_spec(v);
    const int64_t io = int64_t(dtype_size(v.io_dtype));
    f.conv_state_bytes_per_slot = L * aligned_row_elems(conv_state_row_elems(spec, v.pool.scratch_steps), v.io_dtype) * io;
    if (!policy.conv_offset_window)
      f.conv_scratch_bytes_per_slot =
          L * v.pool.scratch_steps * aligned_row_elems(conv_scratch_row_elems(spec), v.io_dtype) * io;
  }
  return f;
}

void add_conv_option(OptionTable& t, bool& conv) {
  t.flag("no-conv", "run the recurrent part alone, without the short convolution (on by default: the preset's, "
         "W = 4, SiLU, no bias, as Kimi-Linear and Kimi-K3)",
         [&conv] { conv = false; });
}

void add_unfused_conv_option(OptionTable& t, bool& fuse_conv) {
  t.flag("unfused-conv", "with the conv, run it and each layer's verify as two kernels, for comparison (default: "
         "one kernel per layer, the conv fused into the verify)",
         [&fuse_conv] { fuse_conv = false; });
}

std::string describe_conv(const VerifierConfig& v) {
  if (v.conv.width == 0) return describe(v.conv);
  return describe(v.conv) + (v.fuse_conv ? ", fused into each layer's verify (one kernel per layer)"
                                         : ", unfused (--unfused-conv): conv then verify, two kernels per layer");
}

std::string describe(const ConvShape& conv) {
  if (conv.width == 0) return "off (--no-conv): the recurrent part alone";
  return "W=" + std::to_string(conv.width) + (conv.activation == ConvActivation::silu ? " SiLU" : " linear") +
         ", no bias, C=" + std::to_string(conv.channels);
}

void add_ring_options(OptionTable& t, ReplayRing& ring) {
  t.value("ring", "R",
          "replay mode only: records a slot's corrections ring holds per layer and head (docs/modes.md), at least 2T "
          "(default 3T)",
          [&ring](const std::string& n, const std::string& v) {
            ring.records = int32_t(parse_int(n, v, 1, 1 << 16));
          });
  t.value("flush-min", "N",
          "replay mode only: fold the pending records into the checkpoint once N have gathered, 0 every round, "
          "at most R - T (default T + 1, or R - T where that is less)",
          [&ring](const std::string& n, const std::string& v) {
            ring.flush_min = int32_t(parse_int(n, v, 0, 1 << 16));
          });
}

std::string describe_ring(const ReplayRing& ring, int32_t tokens) {
  const ReplayRing r = resolved_ring(ring, tokens);
  const std::string flush =
      r.flush_min == 0 ? "flush every round" : "flush at " + std::to_string(r.flush_min) + " pending records";
  return "R=" + std::to_string(r.records) + ", " + flush;
}

void add_pdl_option(OptionTable& t, bool& pdl) {
  t.flag("no-pdl", "launch every kernel of a round only after the previous one has finished (by default each "
         "may start early, programmatic dependent launch on sm_90 and later: docs/graphs.md)",
         [&pdl] { pdl = false; });
}

std::string describe_pdl(bool pdl, Backend backend) {
  if (!pdl) return "off (--no-pdl): each kernel starts after the previous one has finished";
  if (backend == Backend::cpu) return "on (no effect on the CPU backend)";
  return "on: each kernel of a round may start before the previous one finishes (sm_90 and later)";
}

std::string describe(const ModelShape& m) {
  return "L=" + std::to_string(m.layers) + " H=" + std::to_string(m.heads) + " HV=" + std::to_string(m.value_heads) +
         " K=" + std::to_string(m.head_k) + " V=" + std::to_string(m.head_v);
}

}  // namespace kdagraph::cli
