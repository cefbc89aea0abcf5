// kdagraph._kdagraph._reference: the C++ reference a Python round trip is compared with (docs/cli.md). The
// host engine runs rounds of synthetic inputs through its own Verifier and GraphRunner; the synthetic
// generators give Python the very same inputs, states, gate parameters and accept lengths, so a round
// driven from Python can be held against it bit for bit.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <string>
#include <vector>

#include "harness/host_engine.h"
#include "harness/synthetic.h"
#include "kernels/stream.h"
#include "python/src/binding.h"

namespace kdagraph::python {
namespace {

using namespace nb::literals;

// A float32 numpy array of `shape` owning a copy of `values`.
nb::object numpy_f32(std::vector<float> values, std::vector<size_t> shape) {
  auto* data = new std::vector<float>(std::move(values));
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, float>(data->data(), shape.size(), shape.data(), owner));
}

nb::object numpy_bytes_as_f32(const std::vector<uint8_t>& bytes, std::vector<size_t> shape) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return numpy_f32(std::move(values), std::move(shape));
}

// Layer `layer`'s inputs of round `round` for the batch `slots`, as the host engine generates them; with
// `conv`, the pre-conv projections x [N, T, C] stand where q, k and v would (docs/conv.md).
nb::dict synthetic_inputs(uint64_t seed, uint32_t round, const std::vector<int32_t>& slots, int32_t layer,
                          int32_t tokens, int32_t heads, int32_t value_heads, int32_t head_k, int32_t head_v,
                          bool raw_gate, bool beta_logit, bool conv) {
  SyntheticInputParams p;
  p.seed = seed;
  p.layer = layer;
  p.raw_gate = raw_gate;
  p.beta_logit = beta_logit;
  const size_t N = slots.size(), T = size_t(tokens), H = size_t(heads), HV = size_t(value_heads);
  const size_t K = size_t(head_k), V = size_t(head_v);
  auto fill = [&](SyntheticField f, size_t width) {
    std::vector<float> out(N * T * width);
    for (size_t n = 0; n < N; ++n)
      for (size_t t = 0; t < T; ++t)
        for (size_t e = 0; e < width; ++e)
          out[(n * T + t) * width + e] = synthetic_input(p, round, slots[n], int32_t(t), f, uint32_t(e));
    return out;
  };
  nb::dict d;
  if (conv) {
    d["x"] = numpy_f32(fill(SyntheticField::conv_x, 2 * H * K + HV * V), {N, T, 2 * H * K + HV * V});
  } else {
    d["q"] = numpy_f32(fill(SyntheticField::q, H * K), {N, T, H, K});
    d["k"] = numpy_f32(fill(SyntheticField::k, H * K), {N, T, H, K});
    d["v"] = numpy_f32(fill(SyntheticField::v, HV * V), {N, T, HV, V});
  }
  d["g"] = numpy_f32(fill(SyntheticField::g, HV * K), {N, T, HV, K});
  d["beta"] = numpy_f32(fill(SyntheticField::beta, HV), {N, T, HV});
  return d;
}

nb::object synthetic_state_of(uint64_t seed, uint32_t request, int32_t layers, int32_t value_heads, int32_t head_v,
                              int32_t head_k) {
  const size_t per_layer = size_t(value_heads) * head_v * head_k;
  std::vector<float> out(size_t(layers) * per_layer);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = synthetic_state(seed, request, uint32_t(i / per_layer), uint32_t(i % per_layer));
  return numpy_f32(std::move(out), {size_t(layers), size_t(value_heads), size_t(head_v), size_t(head_k)});
}

nb::tuple synthetic_gate(uint64_t seed, int32_t layer, int32_t value_heads, int32_t head_k) {
  std::vector<float> a_log(static_cast<size_t>(value_heads)), dt_bias(static_cast<size_t>(value_heads) * head_k);
  for (size_t h = 0; h < a_log.size(); ++h) a_log[h] = synthetic_a_log(seed, uint32_t(layer), uint32_t(h));
  for (size_t e = 0; e < dt_bias.size(); ++e) dt_bias[e] = synthetic_dt_bias(seed, uint32_t(layer), uint32_t(e));
  return nb::make_tuple(numpy_f32(std::move(a_log), {size_t(value_heads)}),
                        numpy_f32(std::move(dt_bias), {size_t(value_heads) * head_k}));
}

// A layer's conv weights [C, W], as the host engine makes them (no bias, as Kimi-Linear).
nb::object synthetic_conv_weight_of(uint64_t seed, int32_t layer, int32_t channels, int32_t width) {
  std::vector<float> w(size_t(channels) * size_t(width));
  for (size_t e = 0; e < w.size(); ++e) w[e] = synthetic_conv_weight(seed, uint32_t(layer), uint32_t(e));
  return numpy_f32(std::move(w), {size_t(channels), size_t(width)});
}

// The conv window [L, W - 1, C] request `request` joins with, fp32 (synthetic_state_element's second part).
nb::object synthetic_conv_window(uint64_t seed, uint32_t request, int32_t layers, int32_t width, int32_t channels) {
  SyntheticStateParams p;
  p.seed = seed;
  p.request = request;
  p.layers = layers;
  p.slot_elems = 0;
  p.window_elems = int64_t(width - 1) * channels;
  std::vector<float> out(size_t(layers) * size_t(p.window_elems));
  p.io_dtype = DType::f32;
  p.conv_window = out.data();
  for (int64_t i = 0; i < synthetic_state_elements(p); ++i) synthetic_state_element(p, i);
  return numpy_f32(std::move(out), {size_t(layers), size_t(width - 1), size_t(channels)});
}

// `rounds` rounds of the host engine with a fixed batch (no retirements), fp32 io and state, outputs kept;
// then every request retires. With conv_width > 0 the layers have the short convolution (docs/conv.md); with
// tree = K > 0 each round's tokens form hashed top-K trees (docs/trees.md: synthetic_tree, synthetic_path). Returns
// (outputs per round [L, n, T, HV, V], batch per round, [(request, slot, state [L, HV, V, K], conv window
// [L, W - 1, C] or None)] in retirement order).
nb::tuple run_host_engine(const std::string& backend, int32_t layers, int32_t heads, int32_t value_heads,
                          int32_t head_k, int32_t head_v, int32_t tokens, int32_t slots, int32_t scratch_steps,
                          int32_t batch, nb::handle mode, const std::string& exec, bool l2norm_qk,
                          const std::string& gate, bool beta_is_logit, double accept_rate, uint64_t seed,
                          int32_t rounds, int32_t conv_width, nb::handle conv_activation, int32_t tree) {
  HostEngineConfig c;
  c.verifier.backend = backend_from(backend);
  c.verifier.model = ModelShape{layers, heads, value_heads, head_k, head_v};
  c.verifier.pool = PoolShape{slots, scratch_steps, DType::f32};
  c.verifier.max_rows = batch;
  c.verifier.tokens = tokens;
  c.verifier.io_dtype = DType::f32;
  c.verifier.mode = mode_from(mode);
  c.verifier.options.l2norm_qk = l2norm_qk;
  c.verifier.options.gate = gate_from(gate);
  c.verifier.options.beta_is_logit = beta_is_logit;
  c.verifier.conv = conv_shape(c.verifier.model, conv_width, conv_activation);
  c.verifier.trees = tree > 0;
  c.tree = tree;
  c.runner.exec = exec == "eager" ? Exec::eager : Exec::graph;
  c.batch = batch;
  c.accept_rate = accept_rate;
  c.seed = seed;
  c.keep_outputs = true;
  std::vector<RoundRecord> records;
  std::vector<RetiredRequest> retired;
  {
    nb::gil_scoped_release release;
    detail::StreamHandle stream = detail::StreamHandle::create(c.verifier.backend);
    HostEngine engine(c);
    engine.start(stream.get());
    for (int32_t r = 0; r < rounds; ++r) engine.run_round(stream.get());
    engine.finish(stream.get());
    stream.synchronize();
    records = engine.rounds();
    retired = engine.retired();
  }
  nb::list outputs, batches, states;
  for (const RoundRecord& rec : records) {
    outputs.append(numpy_bytes_as_f32(rec.outputs, {size_t(layers), rec.slots.size(), size_t(tokens),
                                                    size_t(value_heads), size_t(head_v)}));
    batches.append(nb::cast(rec.slots));
  }
  for (const RetiredRequest& r : retired) {
    const size_t C = size_t(c.verifier.conv.channels);
    nb::object window = conv_width > 0 ? numpy_bytes_as_f32(r.conv_window, {size_t(layers), size_t(conv_width - 1), C})
                                       : nb::none();
    states.append(nb::make_tuple(r.request, r.slot,
                                 numpy_bytes_as_f32(r.state, {size_t(layers), size_t(value_heads), size_t(head_v),
                                                              size_t(head_k)}),
                                 window));
  }
  return nb::make_tuple(outputs, batches, states);
}

// docs/trees.md: the host engine's drafter and sampler for one slot's round (harness/synthetic.h).
std::vector<int32_t> synthetic_tree_of(uint64_t seed, uint32_t round, int32_t slot, int32_t tokens, int32_t top_k) {
  require_in_range("synthetic_tree", "tokens", tokens, 1, kMaxSyntheticTree);
  require_in_range("synthetic_tree", "top_k", top_k, 1, kMaxSyntheticTree);
  std::vector<int32_t> parent(static_cast<size_t>(tokens));
  synthetic_tree(seed, round, slot, tokens, top_k, parent.data());
  return parent;
}

std::vector<int32_t> synthetic_path_of(uint64_t seed, uint32_t round, int32_t slot, double accept_rate,
                                       const std::vector<int32_t>& parent) {
  require_in_range("synthetic_path", "parent", int64_t(parent.size()), 1, kMaxSyntheticTree);
  std::vector<int32_t> path(parent.size());
  synthetic_path(seed, round, slot, int32_t(parent.size()), float(accept_rate), parent.data(), path.data());
  return path;
}

}  // namespace

void bind_reference(nb::module_& m) {
  m.def("synthetic_inputs", &synthetic_inputs, "seed"_a, "round"_a, "slots"_a, "layer"_a, "tokens"_a, "heads"_a,
        "value_heads"_a, "head_k"_a, "head_v"_a, "raw_gate"_a, "beta_logit"_a, "conv"_a = false);
  m.def("synthetic_conv_weight", &synthetic_conv_weight_of, "seed"_a, "layer"_a, "channels"_a, "width"_a);
  m.def("synthetic_conv_window", &synthetic_conv_window, "seed"_a, "request"_a, "layers"_a, "width"_a, "channels"_a);
  m.def("synthetic_state", &synthetic_state_of, "seed"_a, "request"_a, "layers"_a, "value_heads"_a, "head_v"_a, "head_k"_a);
  m.def("synthetic_gate", &synthetic_gate, "seed"_a, "layer"_a, "value_heads"_a, "head_k"_a);
  m.def(
      "synthetic_accept_length",
      [](uint64_t seed, uint32_t round, int32_t slot, int32_t tokens, double rate) {
        return synthetic_accept_length(seed, round, slot, tokens, float(rate));
      },
      "seed"_a, "round"_a, "slot"_a, "tokens"_a, "accept_rate"_a);
  m.def("run_host_engine", &run_host_engine, nb::kw_only(), "backend"_a, "layers"_a, "heads"_a, "value_heads"_a,
        "head_k"_a, "head_v"_a, "tokens"_a, "slots"_a, "scratch_steps"_a, "batch"_a, "mode"_a, "exec"_a = "graph",
        "l2norm_qk"_a, "gate"_a, "beta_is_logit"_a, "accept_rate"_a, "seed"_a, "rounds"_a, "conv_width"_a = 0,
        "conv_activation"_a.none() = "silu", "tree"_a = 0);
  m.def("synthetic_tree", &synthetic_tree_of, "seed"_a, "round"_a, "slot"_a, "tokens"_a, "top_k"_a,
        "The host engine's drafted tree of one slot's round: parent [T] (docs/trees.md)");
  m.def("synthetic_path", &synthetic_path_of, "seed"_a, "round"_a, "slot"_a, "accept_rate"_a, "parent"_a,
        "The host engine's accepted root-to-node path [T] (-1 after its end) down `parent`");
}

}  // namespace kdagraph::python
