// docs/storage.md, docs/modes.md, docs/indices.md, docs/graphs.md for Python: the owning classes. A Verifier owns pool, scratch, accept lengths and index
// buffers; a GraphRunner captures its round per bucket (on the CPU, the graph twin that records the
// round with frozen parameters). The runner's layer inputs are the caller's arrays, sized for the
// largest bucket, which it keeps alive: the graphs point at them.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kdagraph/graph_runner.hpp"
#include "kdagraph/verifier.hpp"
#include "python/src/binding.h"

namespace kdagraph::python {
namespace {

using namespace nb::literals;

std::vector<int32_t> host_ints(nb::handle obj, const char* name) {
  std::vector<int32_t> out;
  if (nb::isinstance<nb::list>(obj) || nb::isinstance<nb::tuple>(obj)) {
    for (nb::handle x : nb::borrow<nb::sequence>(obj)) out.push_back(nb::cast<int32_t>(x));
    return out;
  }
  const Array a = take(obj, name);
  require_elem(a, {Elem::i32});
  require_shape(a, {-1});
  if (a.backend != Backend::cpu) throw InvalidArgument(name, std::string(name) + " must be host memory (a list or a CPU array)");
  out.assign(a.as<const int32_t>(), a.as<const int32_t>() + a.dim(0));
  return out;
}

// Rows of `tokens` int32 from host memory (a list of lists, or a CPU array [rows, tokens]), flattened.
struct HostRows {
  std::vector<int32_t> values;
  int32_t rows = 0;
};

HostRows host_rows(nb::handle obj, const char* name, int32_t tokens) {
  HostRows out;
  if (nb::isinstance<nb::list>(obj) || nb::isinstance<nb::tuple>(obj)) {
    for (nb::handle row : nb::borrow<nb::sequence>(obj)) {
      const std::string at = std::string(name) + "[" + std::to_string(out.rows) + "]";
      if (!nb::isinstance<nb::sequence>(row) || int64_t(nb::len(row)) != tokens)
        throw InvalidArgument(at, at + " must list T = " + std::to_string(tokens) + " entries (one per token)");
      for (nb::handle x : nb::borrow<nb::sequence>(row)) out.values.push_back(nb::cast<int32_t>(x));
      ++out.rows;
    }
    return out;
  }
  const Array a = take(obj, name);
  require_elem(a, {Elem::i32});
  require_shape(a, {-1, tokens});
  if (a.backend != Backend::cpu) throw InvalidArgument(name, std::string(name) + " must be host memory (a list or a CPU array)");
  out.values.assign(a.as<const int32_t>(), a.as<const int32_t>() + a.size());
  out.rows = int32_t(a.dim(0));
  return out;
}

struct PyVerifier {
  std::unique_ptr<Verifier> verifier;

  const VerifierConfig& cfg() const { return verifier->config(); }
  Stream stream(nb::handle s) const { return resolve_stream(cfg().backend, s); }

  Array state_array(nb::handle obj, const char* name) const {
    const VerifierConfig& c = cfg();
    Array a = take(obj, name);
    require_elem(a, {elem_of(c.pool.state_dtype)});
    require_shape(a, {c.model.layers, c.model.value_heads, c.model.head_v, c.model.head_k});
    return a;
  }

  Elem io_elem() const { return elem_of(cfg().io_dtype); }

  // Host rows [n, T] of the current batch (set_tree, accept_path_from_host): n is its size.
  HostRows batch_rows(nb::handle obj, const char* name) const {
    HostRows out = host_rows(obj, name, cfg().tokens);
    const int32_t n = verifier->batch_size();
    if (n > 0 && out.rows != n)
      throw InvalidArgument(name, std::string(name) + " has " + std::to_string(out.rows) + " rows; the batch set_batch gave has " +
                                      std::to_string(n));
    return out;
  }

  // docs/conv.md: a conv window of every layer, [L, W - 1, C] in the io dtype, where `like` is (None: absent).
  Array window_array(nb::handle obj, const char* name) const {
    const VerifierConfig& c = cfg();
    Array a = take_optional(obj, name);
    if (a.data == nullptr) return a;
    if (c.conv.width == 0) throw InvalidArgument(name, std::string(name) + " is given, but the verifier has no conv (conv_width = 0)");
    require_elem(a, {io_elem()});
    require_shape(a, {c.model.layers, c.conv.width - 1, c.conv.channels});
    return a;
  }

  // A zero-copy view of one of the Verifier's buffers, alive as long as the Verifier object. `strides` in
  // elements (empty: C-contiguous).
  nb::object view(nb::handle self, void* data, std::vector<size_t> shape, Elem elem, std::vector<int64_t> strides = {}) const {
    nb::dlpack::dtype t = elem == Elem::i32 ? nb::dtype<int32_t>() : elem == Elem::f32 ? nb::dtype<float>() : nb::dtype<uint16_t>();
    if (elem == Elem::f16) t = nb::dlpack::dtype{uint8_t(nb::dlpack::dtype_code::Float), 16, 1};
    const int device = cfg().backend == Backend::cuda ? nb::device::cuda::value : nb::device::cpu::value;
    const int64_t* st = strides.empty() ? nullptr : strides.data();
    if (cfg().backend == Backend::cpu)
      return nb::cast(nb::ndarray<nb::numpy>(data, shape.size(), shape.data(), self, st, t, device),
                      nb::rv_policy::reference);
    return nb::cast(nb::ndarray<>(data, shape.size(), shape.data(), self, st, t, device), nb::rv_policy::reference);
  }
};

// One layer's inputs (and with a conv its conv inputs), kept alive with the graphs that point at them.
struct LayerArrays {
  std::vector<Array> arrays;
  GateArrays gates;
  LayerInputs inputs;
  ConvLayerInputs conv;
};

LayerArrays layer_arrays(const VerifierConfig& c, nb::handle layer, size_t l) {
  const std::string at = "inputs[" + std::to_string(l) + "]";
  if (!nb::isinstance<nb::dict>(layer))
    throw InvalidArgument(at, at + " must be a dict of q, k, v, g, beta, o (and A_log, dt_bias; x, weight, bias with a conv)");
  const nb::dict d = nb::borrow<nb::dict>(layer);
  const Elem io = elem_of(c.io_dtype);
  const int64_t N = c.max_rows, T = c.tokens, H = c.model.heads, HV = c.model.value_heads, K = c.model.head_k,
                V = c.model.head_v;
  LayerArrays out;
  auto key_name = [&](const char* key) { return at + "['" + key + "']"; };
  auto get = [&](const char* key, std::initializer_list<int64_t> shape, Elem elem, bool or_f32 = false) -> void* {
    const std::string name = key_name(key);
    if (!d.contains(key)) throw InvalidArgument(name, name + " is missing");
    Array a = take(d[key], name.c_str());
    if (or_f32) require_elem(a, {elem, Elem::f32});
    else require_elem(a, {elem});
    require_shape(a, shape);
    if (a.backend != c.backend)
      throw InvalidArgument(name, name + " is on " + to_string(a.backend) + " but the verifier is on " + to_string(c.backend));
    out.arrays.push_back(std::move(a));
    return out.arrays.back().data;
  };
  out.inputs.q = get("q", {N, T, H, K}, io);
  out.inputs.k = get("k", {N, T, H, K}, io);
  out.inputs.v = get("v", {N, T, HV, V}, io);
  out.inputs.g = get("g", {N, T, HV, K}, io, true);
  out.inputs.beta = get("beta", {N, T, HV}, io, true);
  // g and beta in q's dtype, or both float32 beside 16-bit io (vLLM's decode).
  const Elem g_elem = out.arrays.end()[-2].elem, beta_elem = out.arrays.back().elem;
  if (g_elem != beta_elem)
    throw InvalidArgument(key_name("beta"), key_name("beta") + " has dtype " + to_string(beta_elem) + " but g has " +
                                                to_string(g_elem) + ": g and beta share the io dtype, or are both float32");
  out.inputs.gate_f32 = io != Elem::f32 && g_elem == Elem::f32;
  out.inputs.o = get("o", {N, T, HV, V}, io);
  if (c.options.gate != GateMode::precomputed) {
    for (const char* key : {"A_log", "dt_bias"})
      if (!d.contains(key)) throw InvalidArgument(key_name(key), key_name(key) + " is missing: the gate is in the kernel");
    out.gates = take_gate(d["A_log"], d["dt_bias"], key_name("A_log"), key_name("dt_bias"), HV, K, out.arrays[0]);
    out.inputs.A_log = out.gates.A_log.as<const float>();
    out.inputs.dt_bias = out.gates.dt_bias.as<const float>();
  }
  if (c.conv.width == 0) {
    for (const char* key : {"x", "weight", "bias"})
      if (d.contains(key)) throw InvalidArgument(key_name(key), key_name(key) + " is given, but the verifier has no conv (conv_width = 0)");
    return out;
  }
  // docs/conv.md: the conv reads x and writes q, k and v, which the verify then reads.
  const int64_t C = c.conv.channels;
  const void* x = get("x", {N, T, C}, io);
  const float* weight = static_cast<const float*>(get("weight", {C, c.conv.width}, Elem::f32));
  const float* bias = d.contains("bias") && !d["bias"].is_none() ? static_cast<const float*>(get("bias", {C}, Elem::f32)) : nullptr;
  out.conv = conv_into_verify_inputs(round_spec(c), x, weight, bias, const_cast<void*>(out.inputs.q),
                                     const_cast<void*>(out.inputs.k), const_cast<void*>(out.inputs.v));
  return out;
}

struct PyRunner {
  nb::object verifier_object;  // the runner must not outlive its verifier
  PyVerifier* verifier = nullptr;
  std::unique_ptr<GraphRunner> runner;  // its hooks hold the layer arrays

  Stream stream(nb::handle s) const { return verifier->stream(s); }
};

}  // namespace

void bind_classes(nb::module_& m) {
  nb::class_<PyVerifier>(m, "Verifier",
                         "The verify round of every KDA layer, owning its storage (docs/storage.md, docs/modes.md, docs/indices.md): pool [L, P, HV, V, K], "
                         "scratch (replay: the ring of records), accept lengths, index and batch buffers")
      .def(
          "__init__",
          [](PyVerifier* self, const std::string& backend, int32_t layers, int32_t heads, int32_t value_heads,
             int32_t head_k, int32_t head_v, int32_t slots, int32_t scratch_steps, int32_t max_rows, int32_t tokens,
             const std::string& io_dtype, const std::string& state_dtype, nb::handle mode, bool l2norm_qk,
             nb::handle scale, const std::string& gate, float lower_bound, bool beta_is_logit, int32_t ring_records,
             int32_t flush_min, int32_t conv_width, nb::handle conv_activation, bool pdl, bool trees, bool count_bytes,
             const std::string& rounding, uint64_t rounding_seed) {
            VerifierConfig c;
            c.backend = backend_from(backend);
            c.model = ModelShape{layers, heads, value_heads, head_k, head_v};
            c.pool = PoolShape{slots, scratch_steps, dtype_from(state_dtype, "state_dtype")};
            c.max_rows = max_rows;
            c.tokens = tokens;
            c.io_dtype = dtype_from(io_dtype, "io_dtype");
            c.mode = mode_from(mode);
            c.options = verify_options(l2norm_qk, scale, gate_from(gate), lower_bound, beta_is_logit);
            c.ring = ReplayRing{ring_records, flush_min};
            c.conv = conv_shape(c.model, conv_width, conv_activation);
            c.pdl = pdl;
            c.trees = trees;
            c.count_bytes = count_bytes;
            c.pool.rounding = rounding_from(rounding);
            c.rounding_seed = rounding_seed;
            new (self) PyVerifier{std::make_unique<Verifier>(c)};
          },
          nb::kw_only(), "backend"_a = "cpu", "layers"_a, "heads"_a, "value_heads"_a, "head_k"_a, "head_v"_a,
          "slots"_a, "scratch_steps"_a, "max_rows"_a, "tokens"_a, "io_dtype"_a = "float32", "state_dtype"_a = "float32",
          "mode"_a = "fused-accept", "l2norm_qk"_a = false, "scale"_a.none() = nb::none(), "gate"_a = "precomputed",
          "lower_bound"_a = -5.0f, "beta_is_logit"_a = false, "ring_records"_a = 0, "flush_min"_a = -1,
          "conv_width"_a = 0, "conv_activation"_a.none() = "silu", "pdl"_a = true, "trees"_a = false,
          "count_bytes"_a = false, "rounding"_a = "nearest", "rounding_seed"_a = VerifierConfig{}.rounding_seed,
          "state_dtype: float32, bfloat16 or float16 (docs/low_precision.md); rounding: 'nearest' or 'stochastic', how every "
          "store of the state rounds to it, stochastic draws keyed by each slot's seed (a prefill gives the slot the "
          "next of its sequence from rounding_seed) and its device-advanced round counter. "
          "ring_records, flush_min: replay's corrections ring (docs/modes.md): R records a slot (0: the default 3 T) and the "
          "pending records at which a verify writes its folded state back to the slot's checkpoint, its pool row "
          "(-1: the default min(T + 1, R - T); 0 flushes every round); 2 T <= R and 0 <= flush_min <= R - T, else "
          "InvalidArgument naming ring.records or ring.flush_min. Other modes ignore them. "
          "conv_width: the layers' short convolution (docs/conv.md), 0 (none) or 2 to 4 over C = 2 H K + HV V channels, "
          "conv_activation 'silu' or 'none' ('linear', None). With a conv the Verifier also owns the conv state, a "
          "prefill takes each layer's window, and a GraphRunner's inputs carry x, weight (and bias). pdl: "
          "programmatic dependent launch of every kernel of its rounds, graphs included, on sm_90 and later "
          "(docs/graphs.md); False for A/B runs. trees: token trees (docs/trees.md, every mode): each row's "
          "T tokens form the tree set_tree gives (chains until then), read on the device inside the round, so "
          "one captured graph per bucket serves any tree; rounds accept root-to-node paths "
          "(accept_path_from_host, GraphRunner.accept_path). With a conv, the conv and the verify of a tree run "
          "as two kernels; on CUDA at most 16 tokens. count_bytes: the round's kernels count the bytes of state "
          "and ring records they move (bytes_moved), for measurements.")
      .def_prop_ro("pdl", [](const PyVerifier& v) { return v.cfg().pdl; })
      .def_prop_ro("trees", [](const PyVerifier& v) { return v.cfg().trees; }, "Token trees (docs/trees.md)")
      .def_prop_ro("backend", [](const PyVerifier& v) { return std::string(to_string(v.cfg().backend)); })
      .def_prop_ro("mode", [](const PyVerifier& v) { return v.cfg().mode; })
      .def_prop_ro("tokens", [](const PyVerifier& v) { return v.cfg().tokens; })
      .def_prop_ro("max_rows", [](const PyVerifier& v) { return v.cfg().max_rows; })
      .def_prop_ro("slots", [](const PyVerifier& v) { return v.cfg().pool.slots; })
      .def_prop_ro("batch_size", [](const PyVerifier& v) { return v.verifier->batch_size(); })
      .def_prop_ro("ring_records", [](const PyVerifier& v) { return v.verifier->spec().ring.records; },
                   "Replay: R, the ring's records a slot (the default filled in)")
      .def_prop_ro("flush_min", [](const PyVerifier& v) { return v.verifier->spec().ring.flush_min; },
                   "Replay: the pending records at which a verify flushes (the default filled in)")
      .def_prop_ro("ring_bytes", [](const PyVerifier& v) { return v.verifier->ring_bytes(); },
                   "Replay: the bytes of the ring's records and cursor, every layer; 0 in the other modes")
      .def_prop_ro("scratch_bytes", [](const PyVerifier& v) { return v.verifier->scratch_bytes(); },
                   "The bytes of the per-token scratch, every layer; 0 in replay")
      .def_prop_ro("count_bytes", [](const PyVerifier& v) { return v.cfg().count_bytes; })
      .def_prop_ro("conv_width", [](const PyVerifier& v) { return v.cfg().conv.width; }, "0: no conv")
      .def_prop_ro("conv_channels", [](const PyVerifier& v) { return v.cfg().conv.channels; })
      .def_prop_ro("conv_activation", [](const PyVerifier& v) { return std::string(conv_activation_name(v.cfg().conv.activation)); })
      .def_prop_ro(
          "conv_window_shape",
          [](const PyVerifier& v) {
            const VerifierConfig& c = v.cfg();
            return nb::make_tuple(c.model.layers, c.conv.width > 0 ? c.conv.width - 1 : 0, c.conv.channels);
          },
          "(L, W - 1, C): what prefill's conv_window and read_conv_window's out hold")
      .def_prop_ro(
          "conv_state",
          [](nb::handle self) -> nb::object {
            const PyVerifier& v = nb::cast<const PyVerifier&>(self);
            const VerifierConfig& c = v.cfg();
            if (c.conv.width == 0) return nb::none();
            const size_t es = dtype_size(c.io_dtype), L = size_t(c.model.layers), P = size_t(c.pool.slots);
            const size_t C = size_t(c.conv.channels);
            const int64_t stride = int64_t(v.verifier->conv_state_bytes() / (L * P * es));
            const size_t columns = size_t(conv_state_row_elems(v.verifier->spec(), c.pool.scratch_steps)) / C;
            return v.view(self, v.verifier->conv_state(), {L, P, columns, C}, v.io_elem(),
                          {int64_t(P) * stride, stride, int64_t(C), 1});
          },
          "The conv state [L, P, columns, C] (columns 2 (W - 1 + S): two halves; two-phase W - 1; rows padded to 16 bytes), zero-copy "
          "(numpy on the CPU, a DLPack array on CUDA; bf16 as uint16 bits); None without a conv. In fused-accept and "
          "replay the window is column accept_len of the half the slot's round parity names; materialize moves it "
          "to column 0.")
      .def_prop_ro(
          "pool",
          [](nb::handle self) {
            const PyVerifier& v = nb::cast<const PyVerifier&>(self);
            const VerifierConfig& c = v.cfg();
            const size_t row = v.verifier->row_stride_bytes() / dtype_size(c.pool.state_dtype);
            if (row != size_t(c.model.value_heads) * c.model.head_v * c.model.head_k)
              throw InvalidArgument("pool", "pool rows are padded at this head shape; use read_pool");
            return v.view(self, v.verifier->pool(),
                          {size_t(c.model.layers), size_t(c.pool.slots), size_t(c.model.value_heads), size_t(c.model.head_v),
                           size_t(c.model.head_k)},
                          elem_of(c.pool.state_dtype));
          },
          "The pool [L, P, HV, V, K], zero-copy (numpy on the CPU, a DLPack array on CUDA; bf16 as uint16 bits)")
      .def_prop_ro(
          "accept_len",
          [](nb::handle self) {
            const PyVerifier& v = nb::cast<const PyVerifier&>(self);
            return v.view(self, v.verifier->accept_len(), {size_t(v.cfg().pool.slots)}, Elem::i32);
          },
          "accept_len [P] int32, zero-copy")
      .def_prop_ro(
          "ring_pending",
          [](nb::handle self) -> nb::object {
            const PyVerifier& v = nb::cast<const PyVerifier&>(self);
            if (!mode_policy(v.cfg().mode).ring) return nb::none();
            return v.view(self, v.verifier->storage().ring_pending, {size_t(v.cfg().pool.slots)}, Elem::i32);
          },
          "Replay: ring_pending [P] int32, zero-copy, each slot's accepted records not yet folded into its "
          "checkpoint (docs/modes.md's hist; the accept step writes it, a flush round restarting it at a); None in the "
          "other modes")
      .def(
          "prefill",
          [](PyVerifier& v, int32_t slot, nb::handle states, nb::handle stream, nb::handle conv_window) {
            const Array a = v.state_array(states, "states");
            const Array w = v.window_array(conv_window, "conv_window");
            if (w.data != nullptr) require_same_place(w, a);
            const Stream s = v.stream(stream);
            nb::gil_scoped_release release;
            if (a.backend == Backend::cpu) v.verifier->prefill(s, slot, a.data, w.data);
            else v.verifier->enqueue_prefill(s, slot, a.data, w.data);
          },
          "slot"_a, "states"_a, "stream"_a.none() = nb::none(), nb::kw_only(), "conv_window"_a.none() = nb::none(),
          "A request joins: pool[l][slot] = states[l] ([L, HV, V, K], state dtype), accept_len[slot] = 0 (replay: its "
          "ring emptied); with a conv, "
          "conv_window [L, W - 1, C] (io dtype, where states is) holds each layer's last W - 1 inputs, oldest first, "
          "and is required. From host memory it returns when done; from device memory it is stream-ordered.")
      .def(
          "read_pool",
          [](PyVerifier& v, int32_t slot, nb::handle out, nb::handle stream) {
            const Array a = v.state_array(out, "out");
            if (a.backend != Backend::cpu) throw InvalidArgument("out", "out must be host memory");
            const Stream s = v.stream(stream);
            nb::gil_scoped_release release;
            v.verifier->read_pool(s, slot, a.data);
          },
          "slot"_a, "out"_a, "stream"_a.none() = nb::none(),
          "Copies pool[l][slot] of every layer into `out` (host [L, HV, V, K]); materialize first in fused-accept and "
          "replay mode (replay's pool row is the checkpoint, before the slot's pending records).")
      .def(
          "read_conv_window",
          [](PyVerifier& v, int32_t slot, nb::handle out, nb::handle stream) {
            if (out.is_none()) throw InvalidArgument("out", "out is None");
            const Array a = v.window_array(out, "out");
            if (a.backend != Backend::cpu) throw InvalidArgument("out", "out must be host memory");
            const Stream s = v.stream(stream);
            nb::gil_scoped_release release;
            v.verifier->read_conv_window(s, slot, a.data);
          },
          "slot"_a, "out"_a, "stream"_a.none() = nb::none(),
          "With a conv: copies each layer's window, columns [0, W - 1) of the slot's conv state, into `out` (host "
          "[L, W - 1, C], io dtype); materialize first in fused-accept and replay, as for read_pool.")
      .def(
          "set_batch",
          [](PyVerifier& v, nb::handle slots, nb::handle stream) {
            const std::vector<int32_t> s = host_ints(slots, "slots");
            const Stream st = v.stream(stream);
            nb::gil_scoped_release release;
            v.verifier->set_batch(st, s.data(), int32_t(s.size()));
          },
          "slots"_a, "stream"_a.none() = nb::none())
      .def_prop_ro(
          "parent",
          [](nb::handle self) -> nb::object {
            const PyVerifier& v = nb::cast<const PyVerifier&>(self);
            if (!v.cfg().trees) return nb::none();
            return v.view(self, v.verifier->batch_buffers().parent, {size_t(v.cfg().max_rows), size_t(v.cfg().tokens)},
                          Elem::i32);
          },
          "With trees: the round's tree [max_rows, T] int32 the index build reads, zero-copy (numpy on the CPU, a "
          "DLPack array on CUDA); None without. set_tree writes it from the host, checked; a drafter on the device "
          "may write rows [0, n) of the batch here itself, before the round (a graph reads it when it runs). A "
          "parent outside [-1, t) written here is read as t - 1 and recorded (device_errors), and "
          "accept_path_from_host, which checks paths against the tree set_tree gave, does not see it: accept such "
          "rounds with GraphRunner.accept_path.")
      .def(
          "set_tree",
          [](PyVerifier& v, nb::handle parent, nb::handle stream) {
            const HostRows p = v.batch_rows(parent, "parent");
            const Stream st = v.stream(stream);
            nb::gil_scoped_release release;
            v.verifier->set_tree(st, p.values.data(), p.rows);
          },
          "parent"_a, "stream"_a.none() = nb::none(),
          "With trees (docs/trees.md): the current batch's token trees, host memory [n, T] (a list of lists or a CPU "
          "int32 array): parent[r][t] in [-1, t), parent[r][0] = -1 (-1: a child of the seed). Checked first, "
          "InvalidArgument naming the entry ('parent[r][t]'); then the index build of every later round reads it, "
          "until the next set_tree. Call it after set_batch (n is the batch size), before the round.")
      .def(
          "accept_path_from_host",
          [](PyVerifier& v, nb::handle accept_index, nb::handle stream) {
            const HostRows a = v.batch_rows(accept_index, "accept_index");
            const Stream st = v.stream(stream);
            nb::gil_scoped_release release;
            v.verifier->enqueue_accept_path_from_host(st, a.values.data(), a.rows);
          },
          "accept_index"_a, "stream"_a.none() = nb::none(),
          "With trees: accepts the round from the sampler's root-to-node paths, host memory [n, T] of the current "
          "batch (SGLang's accept_index: node indices from a child of the seed down the tree set_tree gave, then "
          "-1). Each path is checked against that tree first, InvalidArgument naming the entry "
          "('accept_index[r][i]'); each slot's accept length becomes its last node + 1. Two-phase: commit after.")
      .def(
          "accept_from_host",
          [](PyVerifier& v, nb::handle accepted, nb::handle stream) {
            const std::vector<int32_t> a = host_ints(accepted, "accepted");
            const Stream st = v.stream(stream);
            nb::gil_scoped_release release;
            v.verifier->enqueue_accept_from_host(st, a.data(), int32_t(a.size()));
          },
          "accepted"_a, "stream"_a.none() = nb::none(), "Accept lengths of the current batch from host memory, checked in [1, T].")
      .def(
          "commit",
          [](PyVerifier& v, int32_t rows, nb::handle stream) {
            const Stream st = v.stream(stream);
            nb::gil_scoped_release release;
            v.verifier->enqueue_commit(st, rows);
          },
          "rows"_a, "stream"_a.none() = nb::none())
      .def(
          "materialize",
          [](PyVerifier& v, nb::handle slots, nb::handle stream) {
            const std::vector<int32_t> s = host_ints(slots, "slots");
            const Stream st = v.stream(stream);
            nb::gil_scoped_release release;
            v.verifier->enqueue_materialize(st, s.data(), int32_t(s.size()));
          },
          "slots"_a, "stream"_a.none() = nb::none(),
          "docs/modes.md materialize of the listed slots (host list): pool[slot] = its latest state, accept_len = 0. Replay "
          "folds the slot's pending records into its checkpoint, with the gate in the kernel with the A_log and dt_bias "
          "of each layer's last round.")
      .def("device_errors",
           [](const PyVerifier& v) {
             const DeviceErrorWord w = v.verifier->device_errors();
             nb::dict d;
             d["code"] = to_string(DeviceErrorCode(w.code));
             d["row"] = w.row;
             d["value"] = w.value;
             d["count"] = w.count;
             return d;
           })
      .def("clear_device_errors", [](PyVerifier& v) { v.verifier->clear_device_errors(); })
      .def("bytes_moved", [](const PyVerifier& v) { return v.verifier->bytes_moved(); },
           "With count_bytes: the bytes of state and ring records the kernels moved since the last "
           "clear_bytes_moved (a plain read, like device_errors: read it once the work has completed); 0 without")
      .def("clear_bytes_moved", [](PyVerifier& v) { v.verifier->clear_bytes_moved(); });

  nb::class_<PyRunner>(m, "GraphRunner",
                       "Bucketed graphs of a Verifier's whole round (docs/graphs.md); on the CPU, the graph twin. `inputs`: one "
                       "dict per layer of q, k, v, g, beta, o (and A_log [HV], dt_bias [HV * K] or [HV, K] with the gate "
                       "in the kernel), each sized for max_rows; with the Verifier's conv also x [max_rows, T, C], "
                       "weight [C, W] and optionally bias [C] (float32): each layer's conv reads x and writes q, k and v "
                       "before its verify (docs/conv.md). The graphs point at these arrays, so they must stay where they are. In replay "
                       "mode with the gate in the kernel, A_log and dt_bias are the layer's weights, with which each round "
                       "folds the slots' pending records: a round (or capture) whose gate arrays differ from the "
                       "verifier's last round's, another runner's say, is refused (InvalidArgument naming A_log or "
                       "dt_bias) until every slot has been materialized or prefilled, and for good once a graph was "
                       "captured.")
      .def(
          "__init__",
          [](PyRunner* self, nb::handle verifier, nb::handle inputs, std::optional<std::vector<int32_t>> buckets,
             const std::string& exec, bool strict) {
            PyVerifier& v = nb::cast<PyVerifier&>(verifier);
            const VerifierConfig& c = v.cfg();
            std::vector<LayerArrays> layers;
            const nb::sequence seq = nb::borrow<nb::sequence>(inputs);
            if (int64_t(nb::len(seq)) != c.model.layers)
              throw InvalidArgument("inputs", "inputs lists " + std::to_string(nb::len(seq)) + " layers; the verifier has " +
                                                  std::to_string(c.model.layers));
            for (size_t l = 0; l < nb::len(seq); ++l) layers.push_back(layer_arrays(c, seq[l], l));
            RunnerConfig rc;
            if (buckets) rc.buckets = *buckets;
            if (exec == "graph") rc.exec = Exec::graph;
            else if (exec == "eager") rc.exec = Exec::eager;
            else throw InvalidArgument("exec", "exec = '" + exec + "' is not 'graph' or 'eager'");
            rc.strict = strict;
            auto held = std::make_shared<std::vector<LayerArrays>>(std::move(layers));
            RoundHooks hooks;
            hooks.layer_inputs = [held](int32_t layer) { return (*held)[size_t(layer)].inputs; };
            if (c.conv.width > 0) hooks.conv_inputs = [held](int32_t layer) { return (*held)[size_t(layer)].conv; };
            auto runner = std::make_unique<GraphRunner>(*v.verifier, std::move(hooks), rc);
            new (self) PyRunner{nb::borrow(verifier), &v, std::move(runner)};
          },
          "verifier"_a, "inputs"_a, nb::kw_only(), "buckets"_a = nb::none(), "exec"_a = "graph", "strict"_a = false)
      .def(
          "capture",
          [](PyRunner& r, nb::handle stream) {
            const Stream s = r.stream(stream);
            nb::gil_scoped_release release;
            r.runner->capture(s);
          },
          "stream"_a.none() = nb::none(), "Captures every bucket, largest first (on CUDA: a created stream, not stream 0).")
      .def_prop_ro("captured", [](const PyRunner& r) { return r.runner->captured(); })
      .def_prop_ro("buckets", [](const PyRunner& r) { return r.runner->plan().buckets(); })
      .def_prop_ro("rows", [](const PyRunner& r) { return r.runner->rows(); },
                   "Rows the current batch runs with: its bucket, or n when it runs eagerly")
      .def(
          "set_batch",
          [](PyRunner& r, nb::handle slots, nb::handle stream) {
            const std::vector<int32_t> s = host_ints(slots, "slots");
            const Stream st = r.stream(stream);
            nb::gil_scoped_release release;
            r.runner->set_batch(st, s.data(), int32_t(s.size()));
          },
          "slots"_a, "stream"_a.none() = nb::none())
      .def(
          "run_round",
          [](PyRunner& r, nb::handle stream) {
            const Stream st = r.stream(stream);
            nb::gil_scoped_release release;
            r.runner->run_round(st);
          },
          "stream"_a.none() = nb::none(), "One round of the current batch: one graph launch (or an eager round).")
      .def(
          "accept",
          [](PyRunner& r, nb::handle accepted, nb::handle stream) {
            const VerifierConfig& c = r.verifier->cfg();
            const Array a = take(accepted, "accepted");
            require_elem(a, {Elem::i32});
            require_shape(a, {r.runner->rows()});
            if (a.backend != c.backend)
              throw InvalidArgument("accepted", std::string("accepted is on ") + to_string(a.backend) + " but the verifier is on " +
                                                    to_string(c.backend));
            const Stream st = r.stream(stream);
            nb::gil_scoped_release release;
            r.runner->accept(st, a.as<const int32_t>());
          },
          "accepted"_a, "stream"_a.none() = nb::none(),
          "The accept step after the engine's sampler: accepted [rows] int32 in backend memory; then, in two-phase "
          "mode, the commit.")
      .def(
          "accept_path",
          [](PyRunner& r, nb::handle accept_index, nb::handle stream) {
            const VerifierConfig& c = r.verifier->cfg();
            if (!c.trees)
              throw InvalidArgument("accept_index", "accept_index is given, but the verifier was built without trees "
                                                    "(trees=False): accept lengths with accept");
            const Array a = take(accept_index, "accept_index");
            require_elem(a, {Elem::i32});
            require_shape(a, {r.runner->rows(), c.tokens});
            if (a.backend != c.backend)
              throw InvalidArgument("accept_index", std::string("accept_index is on ") + to_string(a.backend) +
                                                        " but the verifier is on " + to_string(c.backend));
            const Stream st = r.stream(stream);
            nb::gil_scoped_release release;
            r.runner->accept_path(st, a.as<const int32_t>());
          },
          "accept_index"_a, "stream"_a.none() = nb::none(),
          "With the Verifier's trees (docs/trees.md), the accept step after the engine's sampler: accept_index [rows, T] "
          "int32 in backend memory, each row's accepted root-to-node path (SGLang's form: node indices from a "
          "child of the seed down the round's tree, then -1); each slot's accept length becomes its last node + 1. "
          "Read on the device: a path is cut at its first node that is not a child of the one before, and that is "
          "recorded (device_errors). Then, in two-phase mode, the commit.");
}

}  // namespace kdagraph::python
