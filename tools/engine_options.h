// What `kdagraph run` and `kdagraph bench` share: the model presets of docs/shapes.md and their overrides, the
// backend choice, and the HostEngineConfig a command line builds from them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/host_engine.h"
#include "tools/cli_args.h"

namespace kdagraph::cli {

struct Preset {
  const char* name;
  ModelShape model;
  const char* what;
  // What the model runs with unless the command line says otherwise: its draft tokens a round (T =
  // draft + 1; -1: the command's own default) and its short conv's width (docs/conv.md, over C = 2 H K + HV V).
  int32_t draft = -1;
  int32_t conv_width = 4;
};
// tiny (the default), kimi-linear-48b, kimi-linear-48b-tp2, kimi-k3-tp8.
const std::vector<Preset>& presets();
// UsageError naming --preset when `name` is none of them.
const Preset& find_preset(const std::string& name);

// A preset and the options that override its shape; io and state dtypes.
struct ModelOptions {
  std::string preset = "tiny";
  int32_t layers = 0, heads = 0, value_heads = 0, head_dim = 0;  // 0: the preset's
  DType io = DType::f32;
  DType state = DType::f32;

  // The preset with the overrides applied; UsageError when HV is not a multiple of H.
  ModelShape shape() const;
};
// --preset --layers --heads --value-heads --head-dim --dtype --state-dtype
void add_model_options(OptionTable& table, ModelOptions& m);

enum class BackendChoice { automatic, cpu, cuda };
// --backend auto|cpu|cuda
void add_backend_option(OptionTable& table, BackendChoice& choice);
// auto: CUDA when a device is visible, else the CPU (said in one line on stderr). cuda without a
// device is a UsageError.
Backend resolve_backend(BackendChoice choice);

extern const std::vector<std::string> kModeNames;  // indexed by Mode
extern const std::vector<std::string> kExecNames;  // indexed by Exec
extern const std::vector<std::string> kDTypeNames;  // indexed by DType

// One engine of the command line: Kimi Linear's preprocessing (L2 norm on q and k, softplus gate in
// the kernel, beta as a logit), S = T scratch steps, max_rows = batch.
struct EngineSetup {
  Backend backend = Backend::cpu;
  ModelShape model;
  DType io = DType::f32, state = DType::f32;
  int32_t tokens = 4;
  int32_t batch = 1;
  int32_t slots = 0;                 // P; 0: 2 * batch
  std::vector<int32_t> buckets;      // empty: default_buckets(batch)
  Mode mode = Mode::fused_accept;
  Exec exec = Exec::graph;
  bool sampler_in_graph = true;
  double accept_rate = 0.7;
  double retire_rate = 0.0;
  bool vary_batch = false;
  uint64_t seed = 1;
  bool keep_outputs = false;
  int32_t conv_width = 4;            // the short convolution before each layer (SiLU, no bias); 0: none
  bool fuse_conv = true;             // the conv fused into each layer's verify (VerifierConfig::fuse_conv)
  bool pdl = true;                   // programmatic dependent launch of the round's kernels (docs/graphs.md)
  int32_t tree = 0;                  // docs/trees.md: 0 chains; K: top-K token trees (HostEngineConfig::tree)
  ReplayRing ring;                   // replay's corrections ring (VerifierConfig::ring); defaults 3 T, T + 1
  bool count_bytes = false;          // the kernels count the bytes they move (VerifierConfig::count_bytes)
};
HostEngineConfig engine_config(const EngineSetup& e);

// --no-conv: the recurrent part alone, without the short convolution.
void add_conv_option(OptionTable& table, bool& conv);
// --unfused-conv: the conv and the verify as two kernels per layer, for comparison.
void add_unfused_conv_option(OptionTable& table, bool& fuse_conv);
// "W=4 SiLU, no bias, C=384" or "off (--no-conv): the recurrent part alone".
std::string describe(const ConvShape& conv);
// describe(v.conv), and with a conv whether it is fused into the verify.
std::string describe_conv(const VerifierConfig& v);

// --tree K: each round's tokens form a top-K token tree and the sampler accepts a random root-to-node
// path (docs/trees.md); K = 1 is a chain given as a tree.
void add_tree_option(OptionTable& table, int32_t& tree);

// --ring R --flush-min N: replay's corrections ring (docs/modes.md); the library refuses values it cannot hold
// by name (ring.records, ring.flush_min), in replay mode only.
void add_ring_options(OptionTable& table, ReplayRing& ring);
// "R=24, flush at 9 pending records" with the defaults filled in for T = `tokens`.
std::string describe_ring(const ReplayRing& ring, int32_t tokens);

// --no-pdl: every kernel of a round waits for the previous one to finish (for A/B runs).
void add_pdl_option(OptionTable& table, bool& pdl);
// What the switch does on `backend` (on the CPU backend the kernels run one after another anyway).
std::string describe_pdl(bool pdl, Backend backend);

// What a mode costs (docs/modes.md, docs/shapes.md), from the configuration alone.
struct ModeFootprint {
  int64_t transfers = 0;             // state-sized transfers per round, layer and head
  double state_bytes_per_row = 0;    // state bytes one row's round moves, over all layers
  int64_t pool_bytes_per_slot = 0;   // per slot, all layers
  int64_t scratch_bytes_per_slot = 0;
  int64_t ring_bytes_per_slot = 0;  // replay: the ring's records (k, g in the io dtype, u in fp32)
  int64_t conv_state_bytes_per_slot = 0;    // docs/conv.md, with a conv
  int64_t conv_scratch_bytes_per_slot = 0;  // two-phase with a conv
};
ModeFootprint mode_footprint(const VerifierConfig& v);

// "L=2 H=2 HV=4 K=32 V=32"
std::string describe(const ModelShape& m);

}  // namespace kdagraph::cli
