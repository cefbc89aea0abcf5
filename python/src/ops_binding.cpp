// docs/ops.md, docs/python.md: the operations over caller-owned arrays. The drop-in functions of the package
// (recurrent_kda, build_fused_accept_indices) call _verify_indexed and _build_slot_indices; the ops of a
// round (build_indices, verify_layer, accept, commit, materialize) take a RoundSpec, the caller's
// SlotStorage and its RoundIndices. Every array is checked here, naming its Python argument; the
// library then validates the views. The GIL is released while the work runs.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/validate.h"
#include "kdagraph/ops.hpp"
#include "kdagraph/verifier.hpp"
#include "kernels/memory.h"
#include "python/src/binding.h"

namespace kdagraph::python {
namespace {

using namespace nb::literals;

// The Python name of a drop-in's argument (recurrent_kda passes its own names for the arrays it maps).
std::string name_of(const nb::dict& names, const char* param) {
  return names.contains(param) ? nb::cast<std::string>(names[param]) : std::string(param);
}

void require_io(const Array& a, const Array& q) {
  require_same_place(a, q);
  if (a.elem != q.elem)
    throw InvalidArgument(a.name, a.name + " has dtype " + to_string(a.elem) + " but q has " + to_string(q.elem) +
                                      ": every input and the output share one dtype");
}

// g and beta: q's dtype, or both float32 beside a 16-bit q (vLLM's decode); true for the latter.
bool take_gate_dtype(const Array& g, const Array& beta, const Array& q) {
  require_same_place(g, q);
  require_same_place(beta, q);
  const bool f32 = q.elem != Elem::f32 && g.elem == Elem::f32 && beta.elem == Elem::f32;
  for (const Array* a : {&g, &beta})
    if (a->elem != q.elem && !f32)
      throw InvalidArgument(a->name, a->name + " has dtype " + to_string(a->elem) + " but q has " + to_string(q.elem) +
                                         ": g and beta share q's dtype, or are both float32");
  return f32;
}

// A one-layer view of a [rows, HV, V, K] state array whose slot stride may exceed a state (take_rows).
StateView one_layer(const Array& a) {
  return state_view(a.data, dtype_of(a.elem), 1, a.dim(0) * a.row_stride, a.dim(0), a.row_stride);
}

// A layer's inputs over the arrays taken (compact strides; the caller sets a view's).
LayerInputs layer_inputs(const Array& q, const Array& k, const Array& v, const Array& g, const Array& beta,
                         const Array& o, const GateArrays& gates) {
  LayerInputs in;
  in.q = q.data;
  in.k = k.data;
  in.v = v.data;
  in.g = g.data;
  in.beta = beta.data;
  in.o = o.data;
  in.A_log = gates.A_log.as<const float>();
  in.dt_bias = gates.dt_bias.as<const float>();
  in.gate_heads = gates.heads;
  return in;
}

// docs/ops.md: a state pool's slot stride is a multiple of 16 bytes (SGLang's per-slot envelopes are).
constexpr int64_t kStateRowAlignBytes = 16;

// ---- the drop-ins' operations --------------------------------------------------------------------

void verify_indexed(nb::handle q_, nb::handle k_, nb::handle v_, nb::handle g_, nb::handle beta_, nb::handle o_,
                    nb::handle states_, nb::handle seeds_, nb::handle seed_row_, nb::handle seed_token_,
                    nb::handle write_row_, nb::handle A_log_, nb::handle dt_bias_, bool l2norm, nb::handle scale,
                    const std::string& gate, float lower_bound, bool beta_is_logit, bool write_states,
                    nb::handle parent_, nb::handle stream, const nb::dict& names, bool beta_neg_eigval) {
  // q, k and v may be views (SGLang splits one qkv projection): the verify reads them through their
  // strides; everything else is compact.
  const Array q = take_view(q_, name_of(names, "q").c_str());
  require_elem(q, {Elem::f32, Elem::bf16, Elem::f16});
  require_shape(q, {-1, -1, -1, -1});
  const int64_t B = q.dim(0), T = q.dim(1), H = q.dim(2), K = q.dim(3);
  const Array v = take_view(v_, name_of(names, "v").c_str());
  require_shape(v, {B, T, -1, -1});
  const int64_t HV = v.dim(2), V = v.dim(3);
  const Array k = take_view(k_, name_of(names, "k").c_str());
  const Array g = take(g_, name_of(names, "g").c_str());
  const Array beta = take(beta_, name_of(names, "beta").c_str());
  const Array o = take(o_, name_of(names, "output").c_str());
  require_shape(k, {B, T, H, K});
  require_shape(g, {B, T, HV, K});
  require_shape(beta, {B, T, HV});
  require_shape(o, {B, T, HV, V});
  for (const Array* a : {&k, &v, &o}) require_io(*a, q);
  const bool gate_f32 = take_gate_dtype(g, beta, q);

  const Array states = take_rows(states_, name_of(names, "states").c_str(), kStateRowAlignBytes);
  require_elem(states, {Elem::f32, Elem::bf16, Elem::f16});
  require_shape(states, {-1, HV, V, K});
  require_same_place(states, q);
  const Array seeds = seeds_.is_none() ? Array{} : take_rows(seeds_, name_of(names, "seeds").c_str(), kStateRowAlignBytes);
  if (seeds.data != nullptr) {
    require_shape(seeds, {-1, HV, V, K});
    require_same_place(seeds, q);
    if (seeds.elem != states.elem)
      throw InvalidArgument(seeds.name, seeds.name + " has dtype " + to_string(seeds.elem) + " but " + states.name +
                                            " has " + to_string(states.elem));
  }
  auto index = [&](nb::handle obj, const char* param, std::initializer_list<int64_t> shape) {
    Array a = take_optional(obj, name_of(names, param).c_str());
    if (a.data == nullptr) return a;
    require_elem(a, {Elem::i32});
    require_shape(a, shape);
    require_same_place(a, q);
    return a;
  };
  const Array seed_row = index(seed_row_, "seed_row", {B});
  const Array seed_token = index(seed_token_, "seed_token", {B});
  const Array write_row = index(write_row_, "write_row", {B, T});
  const Array parent = index(parent_, "parent", {B, T});
  if (parent.data != nullptr && q.backend == Backend::cuda && T > kMaxCudaTreeTokens)
    throw InvalidArgument(parent.name, parent.name + " is set with T = " + std::to_string(T) + " tokens: the CUDA verify " +
                                           "keeps a tree's branch states for at most " + std::to_string(kMaxCudaTreeTokens) + " tokens");
  const GateMode gate_mode = gate_from(gate);
  GateArrays gates;
  if (gate_mode != GateMode::precomputed)
    gates = take_gate(A_log_, dt_bias_, name_of(names, "A_log"), name_of(names, "dt_bias"), HV, K, q, H);
  if (write_row.data == nullptr) throw InvalidArgument(write_row.name, write_row.name + " is None");

  RoundSpec spec;
  spec.model = ModelShape{1, int32_t(H), int32_t(HV), int32_t(K), int32_t(V)};
  spec.tokens = int32_t(T);
  spec.io_dtype = dtype_of(q.elem);
  spec.options = verify_options(l2norm, scale, gate_mode, lower_bound, beta_is_logit);
  spec.options.beta_neg_eigval = beta_neg_eigval;
  spec.trees = parent.data != nullptr;
  IndexedRows idx;
  idx.seed_row = seed_row.as<const int32_t>();
  idx.seed_token = seed_token.as<const int32_t>();
  idx.write_row = write_row.as<const int32_t>();
  idx.write_states = write_states;
  idx.parent = parent.as<const int32_t>();
  LayerInputs in = layer_inputs(q, k, v, g, beta, o, gates);
  in.gate_f32 = gate_f32;
  auto strides = [](const Array& a) {  // an extent of 1 takes any stride: the compact one (0)
    int64_t st[3];
    for (size_t i = 0; i < 3; ++i) {
      if (a.shape[i] > 1 && a.strides[i] == 0)
        throw InvalidArgument(a.name, a.name + " has stride 0 in dimension " + std::to_string(i) + " (shape " +
                                          a.shape_string() + "): a broadcast view; kdagraph reads views, not broadcasts");
      st[i] = a.shape[i] > 1 ? a.strides[i] : 0;
    }
    return InputStrides{st[0], st[1], st[2]};
  };
  in.q_strides = strides(q);
  in.k_strides = strides(k);
  in.v_strides = strides(v);
  const Stream s = resolve_stream(q.backend, stream, q_);
  const StateView seeds_view = seeds.data != nullptr ? one_layer(seeds) : one_layer(states);
  DeviceErrorWord* errors = module_errors(s);
  nb::gil_scoped_release release;
  ops::verify_indexed(s, spec, seeds_view, one_layer(states), idx, int32_t(B), 0, in, errors);
}

void build_slot_indices(nb::handle slots_, nb::handle pool_, int64_t scratch_steps, int64_t tokens,
                        nb::handle write_row_, nb::handle accepted_, nb::handle stream) {
  const Array slots = take(slots_, "slots");
  require_elem(slots, {Elem::i32});
  require_shape(slots, {-1});
  const int64_t N = slots.dim(0);
  const Array pool = take(pool_, "accept_lens_pool");
  require_elem(pool, {Elem::i32});
  require_shape(pool, {-1});
  require_same_place(pool, slots);
  const Array write_row = take(write_row_, "ssm_state_indices");
  require_elem(write_row, {Elem::i32});
  require_shape(write_row, {N, tokens});
  require_same_place(write_row, slots);
  const Array accepted = take(accepted_, "num_accepted_tokens");
  require_elem(accepted, {Elem::i32});
  require_shape(accepted, {N});
  require_same_place(accepted, slots);
  require_in_range("build_fused_accept_indices", "scratch_steps", scratch_steps, 1, 1 << 16);
  require_in_range("build_fused_accept_indices", "draft_token_num", tokens, 1, scratch_steps);
  const Stream s = resolve_stream(slots.backend, stream, slots_);
  DeviceErrorWord* errors = module_errors(s);
  nb::gil_scoped_release release;
  ops::build_slot_indices(s, slots.as<const int32_t>(), int32_t(N), pool.as<const int32_t>(), int32_t(pool.dim(0)),
                          int32_t(scratch_steps), int32_t(tokens), write_row.as<int32_t>(), accepted.as<int32_t>(), errors);
}

// docs/conv.md, docs/python.md: short_conv's engine (ops::short_conv), the fused-accept offset window over one conv
// state [N, W - 2 + S, C] the caller owns; docs/trees.md: optionally this call's token tree (parent [B, T])
// and the path the call before accepted (accept_index [B, T]).
void short_conv(nb::handle x_, nb::handle state_, nb::handle weight_, nb::handle bias_, nb::handle indices_,
                nb::handle accepted_, nb::handle activation, nb::handle y_, nb::handle parent_,
                nb::handle accept_index_, nb::handle stream) {
  const Array x = take(x_, "x");
  require_elem(x, {Elem::f32, Elem::bf16, Elem::f16});
  require_shape(x, {-1, -1, -1});
  const int64_t B = x.dim(0), T = x.dim(1), C = x.dim(2);
  if (B < 1 || T < 1 || C < 1) throw InvalidArgument("x", "x has shape " + x.shape_string() + "; expected [B, T, C], each at least 1");
  auto same_io = [&](const Array& a) {
    require_same_place(a, x);
    if (a.elem != x.elem)
      throw InvalidArgument(a.name, a.name + " has dtype " + to_string(a.elem) + " but x has " + to_string(x.elem) +
                                        ": x, the conv state and the output share one dtype");
  };
  const Array weight = take(weight_, "weight");
  require_elem(weight, {Elem::f32});
  require_shape(weight, {C, -1});
  require_same_place(weight, x);
  const int64_t W = weight.dim(1);
  if (W < 2 || W > 4)
    throw InvalidArgument("weight", "weight has shape " + weight.shape_string() + ": the conv width W (its last extent) is 2 to 4");
  const Array bias = take_optional(bias_, "bias");
  if (bias.data != nullptr) {
    require_elem(bias, {Elem::f32});
    require_shape(bias, {C});
    require_same_place(bias, x);
  }
  // Any row stride (docs/python.md: short_conv takes any C, the 16-byte rule of §10 is the round's views').
  const Array state = take_rows(state_, "conv_state", 1);
  require_shape(state, {-1, -1, C});
  same_io(state);
  const int64_t columns = state.dim(1), S = columns - (W - 2);
  if (S < T)
    throw InvalidArgument("conv_state", "conv_state has " + std::to_string(columns) + " columns; a width " + std::to_string(W) +
                                            " conv of T = " + std::to_string(T) + " tokens needs W - 2 + S columns with S >= T, at least " +
                                            std::to_string(W - 2 + T));
  const Array indices = take(indices_, "state_indices");
  require_elem(indices, {Elem::i32});
  require_shape(indices, {B});
  require_same_place(indices, x);
  const Array accepted = take(accepted_, "num_accepted_tokens");
  require_elem(accepted, {Elem::i32});
  require_shape(accepted, {B});
  require_same_place(accepted, x);
  const Array y = take(y_, "output");
  require_shape(y, {B, T, C});
  same_io(y);
  auto tree_array = [&](nb::handle obj, const char* name) {
    Array a = take_optional(obj, name);
    if (a.data == nullptr) return a;
    require_elem(a, {Elem::i32});
    require_shape(a, {B, T});
    require_same_place(a, x);
    return a;
  };
  const Array parent = tree_array(parent_, "parent_indices");
  const Array accept_index = tree_array(accept_index_, "accept_index");

  ShortConvCall call;
  call.conv = ConvShape{int32_t(C), int32_t(W), conv_activation_from(activation, "activation")};
  call.io_dtype = dtype_of(x.elem);
  call.batch = int32_t(B);
  call.tokens = int32_t(T);
  call.scratch_steps = int32_t(S);
  call.x = x.data;
  call.weight = weight.as<const float>();
  call.bias = bias.as<const float>();
  call.y = y.data;
  call.conv_state = state_view(state.data, call.io_dtype, 1, state.dim(0) * state.row_stride, state.dim(0), state.row_stride);
  call.state_indices = indices.as<const int32_t>();
  call.num_accepted = accepted.as<const int32_t>();
  call.parent = parent.as<const int32_t>();
  call.accept_index = accept_index.as<const int32_t>();
  const Stream s = resolve_stream(x.backend, stream, x_);
  call.errors = module_errors(s);
  nb::gil_scoped_release release;
  ops::short_conv(s, call);
}

// ---- the ops of a round over caller-owned storage -------------------------------------------------

// What every op of a round agrees on (ops.hpp RoundSpec).
struct PySpec {
  RoundSpec spec;
};

// A compact row stride: `elems` of `dtype` rounded up to 16 bytes (docs/ops.md).
int64_t row_stride_16(int64_t elems, DType dtype) {
  const int64_t per16 = 16 / int64_t(dtype_size(dtype));
  return (elems + per16 - 1) / per16 * per16;
}

// What one row of a per-slot buffer holds: a slot's state [HV, V, K] (pool, scratch), or flat rows of
// `elem` (replay's ring, the conv state and scratch), given as [stride] with stride >= row_elems (a
// 16-byte multiple, which the library checks) or, where `columns` is set, compact as [columns, C].
struct RowForm {
  bool state = true;
  Elem elem = Elem::f32;
  int64_t row_elems = 0;
  int64_t columns = 0, channels = 0;
};

// A buffer of every layer: one array [L, rows, ...row], or a list of L arrays [rows, ...row] whose
// bases go into a table in backend memory (vLLM's tensor per layer).
struct LayerStates {
  std::vector<Array> arrays;
  detail::Buffer table;
  StateView view;
};

// Checks `a` (`per_layer`: one layer's array) against `form`; returns its row stride in elements.
int64_t row_stride_of(const Array& a, const RoundSpec& spec, const RowForm& form, bool per_layer) {
  const ModelShape& m = spec.model;
  if (form.state) {
    require_elem(a, {Elem::f32, Elem::bf16, Elem::f16});  // the state's dtypes
    if (per_layer) require_shape(a, {-1, m.value_heads, m.head_v, m.head_k});
    else require_shape(a, {m.layers, -1, m.value_heads, m.head_v, m.head_k});
    return form.row_elems;
  }
  require_elem(a, {form.elem});
  const size_t lead = per_layer ? 1 : 2;  // [L,] rows
  const bool flat = a.shape.size() == lead + 1;
  const bool columns = form.columns > 0 && a.shape.size() == lead + 2 && a.shape[lead] == form.columns &&
                       a.shape[lead + 1] == form.channels;
  if ((!flat && !columns) || (!per_layer && a.dim(0) != m.layers)) {
    std::string want = std::string(per_layer ? "[rows, " : "[L = " + std::to_string(m.layers) + ", rows, ") + "stride >= " +
                       std::to_string(form.row_elems) + "]";
    if (form.columns > 0)
      want += " or " + std::string(per_layer ? "[rows, " : "[L, rows, ") + std::to_string(form.columns) + ", " +
              std::to_string(form.channels) + "]";
    throw InvalidArgument(a.name, a.name + " has shape " + a.shape_string() + "; expected " + want);
  }
  if (flat && a.shape.back() < form.row_elems)
    throw InvalidArgument(a.name, a.name + " has shape " + a.shape_string() + "; its rows hold " +
                                      std::to_string(a.shape.back()) + " elements, fewer than the " +
                                      std::to_string(form.row_elems) + " of one row");
  return flat ? a.shape.back() : form.columns * form.channels;
}

LayerStates layer_states(nb::handle obj, const char* name, const RoundSpec& spec, const RowForm& form) {
  LayerStates out;
  const ModelShape& m = spec.model;
  const bool list = nb::isinstance<nb::list>(obj) || nb::isinstance<nb::tuple>(obj);
  if (!list) {
    out.arrays.push_back(take(obj, name));
    const Array& a = out.arrays[0];
    const int64_t stride = row_stride_of(a, spec, form, false);
    const int64_t rows = a.dim(1);
    out.view = state_view(a.data, dtype_of(a.elem), m.layers, rows * stride, rows, stride);
    return out;
  }
  const nb::sequence seq = nb::borrow<nb::sequence>(obj);
  if (int64_t(nb::len(seq)) != m.layers)
    throw InvalidArgument(name, std::string(name) + " lists " + std::to_string(nb::len(seq)) + " arrays; expected one per layer (" +
                                    std::to_string(m.layers) + ")");
  std::vector<void*> bases;
  int64_t stride = 0;
  for (size_t l = 0; l < nb::len(seq); ++l) {
    const std::string arg = std::string(name) + "[" + std::to_string(l) + "]";
    out.arrays.push_back(take(seq[l], arg.c_str()));
    const Array& a = out.arrays.back();
    stride = row_stride_of(a, spec, form, true);
    require_same_place(a, out.arrays[0]);
    if (a.shape != out.arrays[0].shape || a.elem != out.arrays[0].elem)
      throw InvalidArgument(arg, arg + " differs in shape or dtype from " + out.arrays[0].name);
    bases.push_back(a.data);
  }
  const Array& first = out.arrays[0];
  out.table = detail::Buffer::copy_of(first.backend, bases);
  out.view = state_view_table(out.table.as<void* const>(), dtype_of(first.elem), m.layers, first.dim(0), stride);
  return out;
}

Backend backend_of(const LayerStates& s) { return s.arrays[0].backend; }

Elem io_elem(const RoundSpec& spec) { return elem_of(spec.io_dtype); }

// The caller's per-slot storage (docs/storage.md, docs/conv.md) as the ops see it; it keeps the arrays alive.
struct PyStorage {
  RoundSpec spec;
  LayerStates pool, scratch, ring_kg, ring_u, conv_state, conv_scratch;
  Array accept_len, ring_pending, ring_start, round_parity, accept_path;
  SlotStorage storage;
  Backend backend = Backend::cpu;

  PyStorage(const PySpec& sp, nb::handle pool_, nb::handle accept_len_, int32_t scratch_steps, nb::handle scratch_,
            nb::handle ring_kg_, nb::handle ring_u_, nb::handle ring_pending_, nb::handle ring_start_,
            nb::handle round_parity_, nb::handle conv_state_, nb::handle conv_scratch_, nb::handle accept_path_)
      : spec(sp.spec) {
    const RowForm state_row{true, Elem::f32, int64_t(spec.model.value_heads) * spec.model.head_v * spec.model.head_k};
    pool = layer_states(pool_, "pool", spec, state_row);
    backend = backend_of(pool);
    accept_len = take(accept_len_, "accept_len");
    require_elem(accept_len, {Elem::i32});
    require_shape(accept_len, {-1});
    require_same_place(accept_len, pool.arrays[0]);
    storage.slots = int32_t(accept_len.dim(0));
    storage.scratch_steps = scratch_steps;
    storage.pool = pool.view;
    storage.accept_len = accept_len.as<int32_t>();
    // The error word is allocated on the pool's default stream if this is the module's first CUDA use.
    const bool listed = nb::isinstance<nb::list>(pool_) || nb::isinstance<nb::tuple>(pool_);
    storage.errors = module_errors(resolve_stream(backend, nb::none(), listed ? pool_[0] : pool_));
    const ModePolicy policy = mode_policy(spec.mode);
    if (policy.per_token_scratch) {
      if (scratch_.is_none()) throw InvalidArgument("scratch", std::string("scratch is None: mode ") + to_string(spec.mode) + " keeps per-token states");
      scratch = layer_states(scratch_, "scratch", spec, state_row);
      require_same_place(scratch.arrays[0], pool.arrays[0]);
      storage.scratch = scratch.view;
    }
    take_ring(policy, ring_kg_, ring_u_, ring_pending_, ring_start_);
    if (needs_round_parity(spec)) {
      if (round_parity_.is_none())
        throw InvalidArgument("round_parity", std::string("round_parity is None: mode ") + to_string(spec.mode) +
                                                  " with a conv keeps a parity [P] int32 per slot (0 after a prefill)");
      round_parity = slot_ints(round_parity_, "round_parity");
      storage.round_parity = round_parity.as<int32_t>();
    }
    take_conv(policy, conv_state_, conv_scratch_);
    take_accept_path(accept_path_);
  }

  // docs/modes.md replay's corrections ring, exactly in replay mode: the records ring_kg [L, rows, stride >=
  // R (H K + HV K)] in the io dtype and ring_u [L, rows, stride >= R HV V] in float32 (or lists of L
  // arrays), and the cursor ring_pending and ring_start [P] int32 (0 after a prefill).
  void take_ring(const ModePolicy& policy, nb::handle ring_kg_, nb::handle ring_u_, nb::handle ring_pending_,
                 nb::handle ring_start_) {
    const std::pair<nb::handle, const char*> args[] = {
        {ring_kg_, "ring_kg"}, {ring_u_, "ring_u"}, {ring_pending_, "ring_pending"}, {ring_start_, "ring_start"}};
    if (!policy.ring) {
      for (auto [obj, name] : args)
        if (!obj.is_none())
          throw InvalidArgument(name, std::string(name) + " is given, but mode " + to_string(spec.mode) +
                                          " keeps no ring (replay does)");
      return;
    }
    const std::string records = "R = " + std::to_string(spec.ring.records) + " records";
    for (auto [obj, name] : args)
      if (obj.is_none())
        throw InvalidArgument(name, std::string(name) + " is None: replay keeps a ring of " + records +
                                        " a slot: ring_kg [L, P, ring_kg_row_stride] (io dtype), ring_u [L, P, "
                                        "ring_u_row_stride] (float32), ring_pending and ring_start [P] int32");
    ring_kg = layer_states(ring_kg_, "ring_kg", spec, RowForm{false, io_elem(spec), ring_kg_row_elems(spec)});
    require_same_place(ring_kg.arrays[0], pool.arrays[0]);
    storage.ring_kg = ring_kg.view;
    ring_u = layer_states(ring_u_, "ring_u", spec, RowForm{false, Elem::f32, ring_u_row_elems(spec)});
    require_same_place(ring_u.arrays[0], pool.arrays[0]);
    storage.ring_u = ring_u.view;
    ring_pending = slot_ints(ring_pending_, "ring_pending");
    storage.ring_pending = ring_pending.as<int32_t>();
    ring_start = slot_ints(ring_start_, "ring_start");
    storage.ring_start = ring_start.as<int32_t>();
  }

  // A per-slot array [P] int32 beside the pool.
  Array slot_ints(nb::handle obj, const char* name) const {
    Array a = take(obj, name);
    require_elem(a, {Elem::i32});
    require_shape(a, {storage.slots});
    require_same_place(a, pool.arrays[0]);
    return a;
  }

  // docs/trees.md: each slot's accepted path [P, T] int32, exactly where needs_accept_path(spec).
  void take_accept_path(nb::handle accept_path_) {
    if (!needs_accept_path(spec)) {
      if (!accept_path_.is_none())
        throw InvalidArgument("accept_path", "accept_path is given, but the spec keeps no accepted path (it is kept "
                                             "with trees and a conv in fused-accept and replay)");
      return;
    }
    if (accept_path_.is_none())
      throw InvalidArgument("accept_path", std::string("accept_path is None: with trees and a conv, ") +
                                               to_string(spec.mode) + " keeps each slot's accepted path, [P, T = " +
                                               std::to_string(spec.tokens) + "] int32");
    accept_path = take(accept_path_, "accept_path");
    require_elem(accept_path, {Elem::i32});
    require_shape(accept_path, {storage.slots, spec.tokens});
    require_same_place(accept_path, pool.arrays[0]);
    storage.accept_path = accept_path.as<int32_t>();
  }

  // docs/conv.md: the conv state [L, P, columns, C] (columns 2 (W - 1 + S): two halves; two-phase W - 1) and,
  // in two-phase, the conv scratch [L, P * S, W - 1, C], exactly when the spec has a conv.
  void take_conv(const ModePolicy& policy, nb::handle conv_state_, nb::handle conv_scratch_) {
    const ConvShape& conv = spec.conv;
    if (conv.width == 0) {
      for (auto [obj, name] : {std::pair{conv_state_, "conv_state"}, std::pair{conv_scratch_, "conv_scratch"}})
        if (!obj.is_none()) throw InvalidArgument(name, std::string(name) + " is given, but the spec has no conv (conv_width = 0)");
      return;
    }
    const int64_t state_elems = conv_state_row_elems(spec, storage.scratch_steps);
    if (conv_state_.is_none())
      throw InvalidArgument("conv_state", "conv_state is None: the spec has a conv; expected [L, P, " +
                                              std::to_string(state_elems / conv.channels) + ", C = " + std::to_string(conv.channels) + "]");
    conv_state = layer_states(conv_state_, "conv_state", spec,
                              RowForm{false, io_elem(spec), state_elems, state_elems / conv.channels, conv.channels});
    require_same_place(conv_state.arrays[0], pool.arrays[0]);
    storage.conv_state = conv_state.view;
    if (policy.conv_offset_window) {
      if (!conv_scratch_.is_none())
        throw InvalidArgument("conv_scratch", std::string("conv_scratch is given, but mode ") + to_string(spec.mode) +
                                                  " keeps the conv window in place (no conv scratch)");
      return;
    }
    if (conv_scratch_.is_none())
      throw InvalidArgument("conv_scratch", "conv_scratch is None: two-phase keeps each token's conv window, [L, P * S, " +
                                                std::to_string(conv.width - 1) + ", C]");
    conv_scratch = layer_states(conv_scratch_, "conv_scratch", spec,
                                RowForm{false, io_elem(spec), conv_scratch_row_elems(spec), conv.width - 1, conv.channels});
    require_same_place(conv_scratch.arrays[0], pool.arrays[0]);
    storage.conv_scratch = conv_scratch.view;
  }
};

// The caller's index storage: round_index_elems(rows, tokens) int32.
struct PyIndices {
  Array storage;
  RoundIndices idx;
  PyIndices(nb::handle storage_, int32_t rows, int32_t tokens) {
    storage = take(storage_, "storage");
    require_elem(storage, {Elem::i32});
    require_shape(storage, {round_index_elems(rows, tokens)});
    idx = round_indices(storage.as<int32_t>(), rows, tokens);
  }
};

Array int_array(nb::handle obj, const char* name, int64_t length, const PyStorage& st) {
  Array a = take(obj, name);
  require_elem(a, {Elem::i32});
  require_shape(a, {length});
  require_same_place(a, st.pool.arrays[0]);
  return a;
}

// A round's input or output array of the io dtype, with `shape` (-1: any), in the storage's place.
Array io_array(nb::handle obj, const char* name, std::initializer_list<int64_t> shape, const PySpec& spec,
               const PyStorage& st) {
  Array a = take(obj, name);
  require_elem(a, {io_elem(spec.spec)});
  require_shape(a, shape);
  require_same_place(a, st.pool.arrays[0]);
  return a;
}

void require_backend_match(const PyStorage& st, const PyIndices& idx) {
  require_same_place(idx.storage, st.pool.arrays[0]);
}

// A round's conv arguments: x [>= rows, T, C] in the io dtype, weight [C, W] and bias [C] or None, float32,
// beside the storage.
struct ConvArrays {
  Array x, weight, bias;
};

ConvArrays take_conv(const PySpec& spec, const PyStorage& st, int32_t rows, nb::handle x_, nb::handle weight_,
                     nb::handle bias_) {
  const ConvShape& conv = spec.spec.conv;
  if (conv.width == 0) throw InvalidArgument("spec", "spec has no conv (conv_width = 0)");
  ConvArrays c;
  c.x = take(x_, "x");
  require_elem(c.x, {io_elem(spec.spec)});
  require_shape(c.x, {-1, spec.spec.tokens, conv.channels});
  require_same_place(c.x, st.pool.arrays[0]);
  if (c.x.dim(0) < rows) throw InvalidArgument("x", "x holds " + std::to_string(c.x.dim(0)) + " rows; the round has " + std::to_string(rows));
  c.weight = take(weight_, "weight");
  require_elem(c.weight, {Elem::f32});
  require_shape(c.weight, {conv.channels, conv.width});
  require_same_place(c.weight, st.pool.arrays[0]);
  c.bias = take_optional(bias_, "bias");
  if (c.bias.data != nullptr) {
    require_elem(c.bias, {Elem::f32});
    require_shape(c.bias, {conv.channels});
    require_same_place(c.bias, st.pool.arrays[0]);
  }
  return c;
}

}  // namespace

void bind_ops(nb::module_& m) {
  m.def("_verify_indexed", &verify_indexed, "q"_a, "k"_a, "v"_a, "g"_a, "beta"_a, "output"_a, "states"_a,
        "seeds"_a.none(), "seed_row"_a.none(), "seed_token"_a.none(), "write_row"_a.none(), "A_log"_a.none(),
        "dt_bias"_a.none(), "use_qk_l2norm_in_kernel"_a, "scale"_a.none(), "gate"_a, "lower_bound"_a,
        "beta_is_logit"_a, "write_states"_a, "parent"_a.none(), "stream"_a.none(), "names"_a,
        "beta_neg_eigval"_a = false,
        "docs/python.md: the verify over rows the caller names (ops::verify_indexed); recurrent_kda's engine. q, k and v "
        "may be views with any strides but a contiguous last dim (read in place); A_log and dt_bias per value head "
        "or per query/key head, either None (zeros). write_states False: a frozen verify (disable_state_update), "
        "outputs only. parent [B, T]: a token tree per row (docs/trees.md), None: chains. beta_neg_eigval: FLA's "
        "allow_neg_eigval, beta = 2 sigmoid(x) for a logit.");
  m.def("_build_slot_indices", &build_slot_indices, "slots"_a, "accept_lens_pool"_a, "scratch_steps"_a,
        "draft_token_num"_a, "ssm_state_indices"_a, "num_accepted_tokens"_a, "stream"_a.none(),
        "docs/indices.md, docs/python.md: SGLang's fused-accept index pair (ops::build_slot_indices).");
  m.def("_short_conv", &short_conv, "x"_a, "conv_state"_a, "weight"_a, "bias"_a.none(), "state_indices"_a,
        "num_accepted_tokens"_a, "activation"_a.none(), "output"_a, "parent_indices"_a.none(), "accept_index"_a.none(),
        "stream"_a.none(),
        "docs/conv.md, docs/python.md: the short convolution over one caller-owned conv state (ops::short_conv); short_conv's engine. "
        "parent_indices [B, T]: this call's token tree per row (docs/trees.md), None: chains; accept_index [B, T]: the "
        "path each row accepted in the call before, None: the offset window of num_accepted_tokens.");

  nb::class_<PySpec>(m, "RoundSpec", "What every operation of a round agrees on (ops.hpp RoundSpec)")
      .def(
          "__init__",
          [](PySpec* self, int32_t layers, int32_t heads, int32_t value_heads, int32_t head_k, int32_t head_v,
             int32_t tokens, const std::string& io_dtype, nb::handle mode, bool l2norm_qk, nb::handle scale,
             const std::string& gate, float lower_bound, bool beta_is_logit, int32_t ring_records, int32_t flush_min,
             int32_t conv_width, nb::handle conv_activation, bool pdl, bool trees) {
            RoundSpec spec;
            spec.model = ModelShape{layers, heads, value_heads, head_k, head_v};
            spec.tokens = tokens;
            spec.io_dtype = dtype_from(io_dtype, "io_dtype");
            spec.mode = mode_from(mode);
            spec.options = verify_options(l2norm_qk, scale, gate_from(gate), lower_bound, beta_is_logit);
            spec.ring = resolved_ring(ReplayRing{ring_records, flush_min}, tokens);
            if (mode_policy(spec.mode).ring) detail::validate_ring("RoundSpec", "ring", spec.ring, tokens);
            spec.conv = conv_shape(spec.model, conv_width, conv_activation);
            spec.pdl = pdl;
            spec.trees = trees;
            new (self) PySpec{spec};
          },
          nb::kw_only(), "layers"_a, "heads"_a, "value_heads"_a, "head_k"_a, "head_v"_a, "tokens"_a,
          "io_dtype"_a = "float32", "mode"_a = "fused-accept", "l2norm_qk"_a = false, "scale"_a.none() = nb::none(),
          "gate"_a = "precomputed", "lower_bound"_a = -5.0f, "beta_is_logit"_a = false, "ring_records"_a = 0,
          "flush_min"_a = -1, "conv_width"_a = 0, "conv_activation"_a.none() = "silu", "pdl"_a = true, "trees"_a = false,
          "ring_records, flush_min: replay's corrections ring (docs/modes.md), R records a slot (0: the default 3 T) and "
          "the pending records at which a verify writes its folded state back to the checkpoint (-1: the default "
          "min(T + 1, R - T); 0 flushes every round); 2 T <= R and 0 <= flush_min <= R - T, else InvalidArgument "
          "naming ring.records or ring.flush_min. Other modes ignore them. "
          "conv_width: the layers' short convolution (docs/conv.md), 0 (none) or 2 to 4, over C = 2 H K + HV V channels; "
          "conv_activation 'silu' or 'none' ('linear', None). pdl: programmatic dependent launch of the round's "
          "kernels on sm_90 and later (docs/graphs.md; an engine kernel just before one of them must not write the state "
          "rows it reads); False launches each after the previous one has finished. trees: token trees (docs/trees.md, "
          "every mode): build_indices takes each row's tree (parent), accept_path the sampler's root-to-node "
          "paths; with a conv, conv_layer then verify_layer (conv_verify_layer refuses trees), and in fused-accept "
          "and replay the storage keeps each slot's accepted path (SlotStorage accept_path).")
      .def_prop_ro("pdl", [](const PySpec& s) { return s.spec.pdl; })
      .def_prop_ro("trees", [](const PySpec& s) { return s.spec.trees; }, "Token trees (docs/trees.md)")
      .def_prop_ro("keeps_accept_path", [](const PySpec& s) { return needs_accept_path(s.spec); },
                   "Whether a SlotStorage of this spec takes accept_path [P, T] int32 (trees with the conv state's "
                   "halves: fused-accept or replay with a conv)")
      .def_prop_ro("keeps_round_parity", [](const PySpec& s) { return needs_round_parity(s.spec); },
                   "Whether a SlotStorage of this spec takes round_parity [P] int32 (the conv state's halves: "
                   "fused-accept or replay with a conv)")
      .def_prop_ro("layers", [](const PySpec& s) { return s.spec.model.layers; })
      .def_prop_ro("tokens", [](const PySpec& s) { return s.spec.tokens; })
      .def_prop_ro("mode", [](const PySpec& s) { return s.spec.mode; })
      .def_prop_ro("conv_width", [](const PySpec& s) { return s.spec.conv.width; }, "0: no conv")
      .def_prop_ro("conv_channels", [](const PySpec& s) { return s.spec.conv.channels; }, "C = 2 H K + HV V (0 without a conv)")
      .def_prop_ro("conv_activation", [](const PySpec& s) { return std::string(conv_activation_name(s.spec.conv.activation)); })
      .def("conv_state_row_elems", [](const PySpec& s, int32_t scratch_steps) { return conv_state_row_elems(s.spec, scratch_steps); },
           "scratch_steps"_a,
           "Elements of one conv state row: 2 (W - 1 + S) C in fused-accept and replay (two halves), (W - 1) C in two-phase")
      .def_prop_ro("conv_scratch_row_elems", [](const PySpec& s) { return conv_scratch_row_elems(s.spec); },
                   "Elements of one conv scratch row (two-phase): (W - 1) * C")
      .def_prop_ro("ring_records", [](const PySpec& s) { return s.spec.ring.records; },
                   "Replay: R, the ring's records a slot (the default filled in)")
      .def_prop_ro("flush_min", [](const PySpec& s) { return s.spec.ring.flush_min; },
                   "Replay: the pending records at which a verify flushes (the default filled in)")
      .def_prop_ro("ring_kg_row_elems", [](const PySpec& s) { return ring_kg_row_elems(s.spec); },
                   "Elements (io dtype) of one slot's ring_kg row (replay): R (H K + HV K), the records' k [R, H, K] "
                   "then their g [R, HV, K]; a row stride rounds it up to 16 bytes")
      .def_prop_ro("ring_u_row_elems", [](const PySpec& s) { return ring_u_row_elems(s.spec); },
                   "Elements (float32) of one slot's ring_u row (replay): R HV V, each record's u")
      .def_prop_ro(
          "ring_kg_row_stride", [](const PySpec& s) { return row_stride_16(ring_kg_row_elems(s.spec), s.spec.io_dtype); },
          "The last extent of a compact ring_kg [L, P, stride]")
      .def_prop_ro(
          "ring_u_row_stride", [](const PySpec& s) { return row_stride_16(ring_u_row_elems(s.spec), DType::f32); },
          "The last extent of a compact ring_u [L, P, stride]");

  nb::class_<PyStorage>(m, "SlotStorage",
                        "The caller's per-slot storage (docs/storage.md, docs/conv.md, docs/ops.md): pool and scratch as one array [L, rows, HV, V, K] "
                        "or a list of L arrays [rows, HV, V, K]; accept_len [P] int32. Replay (no scratch) keeps a "
                        "checkpoint a slot (its pool row) and a ring of spec.ring_records records a slot and layer "
                        "(docs/modes.md): ring_kg [L, P, stride >= spec.ring_kg_row_elems] in the io dtype (each record's k "
                        "and g) and ring_u [L, P, stride >= spec.ring_u_row_elems] in float32 (its u), strides 16-byte "
                        "multiples (ring_kg_row_stride, ring_u_row_stride: compact), or lists of L arrays [P, stride]; "
                        "and its cursor, ring_pending and ring_start [P] int32, 0 after a prefill (ring_pending counts "
                        "the slot's accepted records not yet folded into its checkpoint); other modes refuse them. "
                        "With a conv (spec.conv_width > 0) the conv state [L, P, 2 (W - 1 + S) (two-phase: W - 1), C] "
                        "and, in two-phase, the conv scratch [L, P * S, W - 1, C] in the io dtype (or [L, rows, stride] "
                        "with padded rows, or lists of L arrays); round_parity [P] int32 (0 after a prefill) where "
                        "spec.keeps_round_parity (fused-accept or replay with a conv); accept_path [P, T] int32 where "
                        "spec.keeps_accept_path (trees and a conv, fused-accept or replay): each slot's accepted path, "
                        "which accept_path writes and the next round's conv reads its history through (not read while "
                        "a slot's accept_len is 0, so any values after a prefill)")
      .def(nb::init<const PySpec&, nb::handle, nb::handle, int32_t, nb::handle, nb::handle, nb::handle, nb::handle,
                    nb::handle, nb::handle, nb::handle, nb::handle, nb::handle>(),
           "spec"_a, nb::kw_only(), "pool"_a, "accept_len"_a, "scratch_steps"_a, "scratch"_a.none() = nb::none(),
           "ring_kg"_a.none() = nb::none(), "ring_u"_a.none() = nb::none(), "ring_pending"_a.none() = nb::none(),
           "ring_start"_a.none() = nb::none(), "round_parity"_a.none() = nb::none(), "conv_state"_a.none() = nb::none(),
           "conv_scratch"_a.none() = nb::none(), "accept_path"_a.none() = nb::none())
      .def_prop_ro("slots", [](const PyStorage& s) { return s.storage.slots; })
      .def_prop_ro("scratch_steps", [](const PyStorage& s) { return s.storage.scratch_steps; });

  nb::class_<PyIndices>(m, "RoundIndices", "A round's indices in the caller's int32 array of round_index_elems(rows, tokens)")
      .def(nb::init<nb::handle, int32_t, int32_t>(), "storage"_a, "rows"_a, "tokens"_a)
      .def_prop_ro("capacity", [](const PyIndices& i) { return i.idx.capacity; });
  m.def("round_index_elems", &round_index_elems, "rows"_a, "tokens"_a);
  m.def(
      "round_index_offsets",
      [](int32_t rows, int32_t tokens) {
        std::vector<int32_t> base(size_t(round_index_elems(rows, tokens)));
        const RoundIndices idx = round_indices(base.data(), rows, tokens);
        nb::dict d;
        auto at = [&](const char* name, const int32_t* p, int64_t n) { d[name] = nb::make_tuple(p - base.data(), n); };
        at("row_slot", idx.row_slot, rows);
        at("seed_pool", idx.seed_pool, rows);
        at("seed_scratch", idx.seed_scratch, rows);
        at("seed_accept", idx.seed_accept, rows);
        at("row_accept", idx.row_accept, rows);
        at("ring_pending", idx.ring_pending, rows);
        at("ring_start", idx.ring_start, rows);
        at("ring_flush", idx.ring_flush, rows);
        at("row_parity", idx.row_parity, rows);
        at("write_row", idx.write_row, int64_t(rows) * tokens);
        at("parent", idx.parent, int64_t(rows) * tokens);
        return d;
      },
      "rows"_a, "tokens"_a, "Where each array of RoundIndices starts in its storage, and its length: {name: (offset, length)}");

  m.def(
      "build_indices",
      [](const PySpec& spec, const PyStorage& st, const PyIndices& idx, nb::handle slots_, nb::handle n_real_,
         int32_t rows, nb::handle parent_, nb::handle stream) {
        require_backend_match(st, idx);
        const Array slots = int_array(slots_, "slots", rows, st);
        const Array n_real = int_array(n_real_, "n_real", 1, st);
        Array parent;
        if (!parent_.is_none()) {
          if (!spec.spec.trees)
            throw InvalidArgument("parent", "parent is given, but spec.trees is not set: RoundSpec(trees=True) verifies "
                                            "token trees (docs/trees.md)");
          parent = take(parent_, "parent");
          require_elem(parent, {Elem::i32});
          require_shape(parent, {rows, spec.spec.tokens});
          require_same_place(parent, st.pool.arrays[0]);
        }
        const Stream s = resolve_stream(st.backend, stream, slots_);
        nb::gil_scoped_release release;
        ops::build_indices(s, spec.spec, st.storage,
                           BatchView{slots.as<const int32_t>(), n_real.as<const int32_t>(), rows, parent.as<const int32_t>()},
                           idx.idx);
      },
      "spec"_a, "storage"_a, "indices"_a, nb::kw_only(), "slots"_a, "n_real"_a, "rows"_a,
      "parent"_a.none() = nb::none(), "stream"_a.none() = nb::none(),
      "docs/indices.md: the round's indices from the batch (slots [rows], n_real [1], backend memory). With spec.trees, "
      "parent [rows, T] int32 (backend memory) gives each row's token tree (docs/trees.md: parent[n][0] = -1, "
      "parent[n][t] in [-1, t), -1 a child of the seed), copied into the indices the round's ops read; None: chains. "
      "Read as the device reads it: a parent outside [-1, t) is read as t - 1 and recorded (device_errors).");
  m.def(
      "verify_layer",
      [](const PySpec& spec, const PyStorage& st, const PyIndices& idx, int32_t rows, int32_t layer, nb::handle q_,
         nb::handle k_, nb::handle v_, nb::handle g_, nb::handle beta_, nb::handle o_, nb::handle A_log_,
         nb::handle dt_bias_, nb::handle stream) {
        require_backend_match(st, idx);
        const ModelShape& md = spec.spec.model;
        const int64_t T = spec.spec.tokens;
        auto input = [&](nb::handle obj, const char* name, std::initializer_list<int64_t> shape) {
          return io_array(obj, name, shape, spec, st);
        };
        const Array q = input(q_, "q", {-1, T, md.heads, md.head_k}), k = input(k_, "k", {q.dim(0), T, md.heads, md.head_k});
        const Array v = input(v_, "v", {q.dim(0), T, md.value_heads, md.head_v});
        auto gate_input = [&](nb::handle obj, const char* name, std::initializer_list<int64_t> shape) {
          Array a = take(obj, name);
          require_elem(a, {io_elem(spec.spec), Elem::f32});
          require_shape(a, shape);
          require_same_place(a, st.pool.arrays[0]);
          return a;
        };
        const Array g = gate_input(g_, "g", {q.dim(0), T, md.value_heads, md.head_k});
        const Array beta = gate_input(beta_, "beta", {q.dim(0), T, md.value_heads});
        const Array o = input(o_, "o", {q.dim(0), T, md.value_heads, md.head_v});
        if (q.dim(0) < rows) throw InvalidArgument("q", "q holds " + std::to_string(q.dim(0)) + " rows; the round has " + std::to_string(rows));
        GateArrays gates;
        if (spec.spec.options.gate != GateMode::precomputed)
          gates = take_gate(A_log_, dt_bias_, "A_log", "dt_bias", md.value_heads, md.head_k, q, md.heads);
        LayerInputs in = layer_inputs(q, k, v, g, beta, o, gates);
        in.gate_f32 = take_gate_dtype(g, beta, q);
        const Stream s = resolve_stream(st.backend, stream, q_);
        nb::gil_scoped_release release;
        ops::verify_layer(s, spec.spec, st.storage, idx.idx, rows, layer, in);
      },
      "spec"_a, "storage"_a, "indices"_a, nb::kw_only(), "rows"_a, "layer"_a, "q"_a, "k"_a, "v"_a, "g"_a, "beta"_a, "o"_a,
      "A_log"_a.none() = nb::none(), "dt_bias"_a.none() = nb::none(), "stream"_a.none() = nb::none(),
      "docs/math.md, docs/modes.md: layer `layer`'s verify of `rows` rows with the indices of the last build_indices. With the gate "
      "in the kernel, A_log [HV] and dt_bias [HV * K] or [HV, K] (float32) are required; otherwise unused. In replay "
      "mode each row first folds its slot's pending ring records into the checkpoint (docs/modes.md), recomputing their "
      "decays from the raw gate an earlier round recorded with these A_log and dt_bias: they must be those the "
      "records were verified with, the layer's weights, unchanged between rounds (the ops keep nothing between "
      "calls and cannot check it; Verifier and GraphRunner do). It then verifies the T tokens from the folded "
      "state and appends their records; on a flush round (pending >= spec.flush_min, or a ring that could not "
      "hold another round) it writes the folded state back to the checkpoint first.");
  m.def(
      "conv_layer",
      [](const PySpec& spec, const PyStorage& st, const PyIndices& idx, int32_t rows, int32_t layer, nb::handle x_,
         nb::handle weight_, nb::handle bias_, nb::handle q_, nb::handle k_, nb::handle v_, nb::handle stream) {
        require_backend_match(st, idx);
        const ModelShape& md = spec.spec.model;
        const int64_t T = spec.spec.tokens;
        const ConvArrays c = take_conv(spec, st, rows, x_, weight_, bias_);
        auto output = [&](nb::handle obj, const char* name, std::initializer_list<int64_t> shape) {
          return io_array(obj, name, shape, spec, st);
        };
        const Array q = output(q_, "q", {c.x.dim(0), T, md.heads, md.head_k});
        const Array k = output(k_, "k", {c.x.dim(0), T, md.heads, md.head_k});
        const Array v = output(v_, "v", {c.x.dim(0), T, md.value_heads, md.head_v});
        const ConvLayerInputs in = conv_into_verify_inputs(spec.spec, c.x.data, c.weight.as<const float>(),
                                                           c.bias.as<const float>(), q.data, k.data, v.data);
        const Stream s = resolve_stream(st.backend, stream, x_);
        nb::gil_scoped_release release;
        ops::conv_layer(s, spec.spec, st.storage, idx.idx, rows, layer, in);
      },
      "spec"_a, "storage"_a, "indices"_a, nb::kw_only(), "rows"_a, "layer"_a, "x"_a, "weight"_a,
      "bias"_a.none() = nb::none(), "q"_a, "k"_a, "v"_a, "stream"_a.none() = nb::none(),
      "docs/conv.md: layer `layer`'s short convolution of `rows` rows with the indices of the last build_indices, before "
      "its verify_layer: x [rows, T, C] (the q, k, v projections concatenated), weight [C, W] and bias [C] float32, "
      "into q [rows, T, H, K], k and v [rows, T, HV, V], the arrays that verify_layer then reads.");
  m.def(
      "conv_verify_layer",
      [](const PySpec& spec, const PyStorage& st, const PyIndices& idx, int32_t rows, int32_t layer, nb::handle x_,
         nb::handle weight_, nb::handle bias_, nb::handle g_, nb::handle beta_, nb::handle o_, nb::handle A_log_,
         nb::handle dt_bias_, nb::handle stream) {
        require_backend_match(st, idx);
        const ModelShape& md = spec.spec.model;
        const int64_t T = spec.spec.tokens;
        const ConvArrays c = take_conv(spec, st, rows, x_, weight_, bias_);
        auto input = [&](nb::handle obj, const char* name, std::initializer_list<int64_t> shape) {
          return io_array(obj, name, shape, spec, st);
        };
        const Array g = input(g_, "g", {c.x.dim(0), T, md.value_heads, md.head_k});
        const Array beta = input(beta_, "beta", {c.x.dim(0), T, md.value_heads});
        const Array o = input(o_, "o", {c.x.dim(0), T, md.value_heads, md.head_v});
        GateArrays gates;
        if (spec.spec.options.gate != GateMode::precomputed)
          gates = take_gate(A_log_, dt_bias_, "A_log", "dt_bias", md.value_heads, md.head_k, c.x);
        ConvLayerInputs conv;
        conv.x = c.x.data;
        conv.weight = c.weight.as<const float>();
        conv.bias = c.bias.as<const float>();
        LayerInputs in;
        in.g = g.data;
        in.beta = beta.data;
        in.o = o.data;
        in.A_log = gates.A_log.as<const float>();
        in.dt_bias = gates.dt_bias.as<const float>();
        const Stream s = resolve_stream(st.backend, stream, x_);
        nb::gil_scoped_release release;
        ops::conv_verify_layer(s, spec.spec, st.storage, idx.idx, rows, layer, conv, in);
      },
      "spec"_a, "storage"_a, "indices"_a, nb::kw_only(), "rows"_a, "layer"_a, "x"_a, "weight"_a,
      "bias"_a.none() = nb::none(), "g"_a, "beta"_a, "o"_a, "A_log"_a.none() = nb::none(),
      "dt_bias"_a.none() = nb::none(), "stream"_a.none() = nb::none(),
      "docs/conv.md: conv_layer and verify_layer of layer `layer` in one kernel, bitwise the same outputs and states: x, "
      "weight and bias as conv_layer takes them (x 16-byte aligned), g, beta, o and the gate parameters as "
      "verify_layer does (in replay mode the layer's weights, unchanged between rounds); q, k and v are neither "
      "passed nor written.");
  m.def(
      "accept",
      [](const PySpec& spec, const PyStorage& st, const PyIndices& idx, int32_t rows, nb::handle accepted_, nb::handle stream) {
        require_backend_match(st, idx);
        const Array accepted = int_array(accepted_, "accepted", rows, st);
        const Stream s = resolve_stream(st.backend, stream, accepted_);
        nb::gil_scoped_release release;
        ops::accept(s, spec.spec, st.storage, idx.idx, rows, accepted.as<const int32_t>());
      },
      "spec"_a, "storage"_a, "indices"_a, nb::kw_only(), "rows"_a, "accepted"_a, "stream"_a.none() = nb::none(),
      "docs/modes.md: accept the round, `accepted` [rows] int32 (the sampler's lengths, backend memory). Replay moves "
      "each slot's ring cursor: ring_pending = (0 if the round flushed, else ring_pending) + a; the rejected "
      "records are never read again.");
  m.def(
      "accept_path",
      [](const PySpec& spec, const PyStorage& st, const PyIndices& idx, int32_t rows, nb::handle accept_index_,
         nb::handle stream) {
        require_backend_match(st, idx);
        if (!spec.spec.trees)
          throw InvalidArgument("accept_index", "accept_index is given, but spec.trees is not set: a round of chains "
                                                "accepts lengths (accept)");
        const Array accept_index = take(accept_index_, "accept_index");
        require_elem(accept_index, {Elem::i32});
        require_shape(accept_index, {rows, spec.spec.tokens});
        require_same_place(accept_index, st.pool.arrays[0]);
        const Stream s = resolve_stream(st.backend, stream, accept_index_);
        nb::gil_scoped_release release;
        ops::accept_path(s, spec.spec, st.storage, idx.idx, rows, accept_index.as<const int32_t>());
      },
      "spec"_a, "storage"_a, "indices"_a, nb::kw_only(), "rows"_a, "accept_index"_a, "stream"_a.none() = nb::none(),
      "docs/trees.md, with spec.trees: accept the round from the sampler's root-to-node paths, `accept_index` [rows, T] "
      "int32 (backend memory; SGLang's form: node indices from a child of the seed down the round's tree, then -1). "
      "Each row's accept length becomes its last node + 1; in replay the accepted path's records become the slot's "
      "next pending ones; with a conv (fused-accept, replay) the slot's path is kept (SlotStorage accept_path). "
      "Read as the device reads it: a path is cut at its first node that is not a child of the one before (a path "
      "cut to nothing keeps token 0), recorded (device_errors).");
  m.def(
      "commit",
      [](const PySpec& spec, const PyStorage& st, const PyIndices& idx, int32_t rows, nb::handle stream) {
        require_backend_match(st, idx);
        const Stream s = resolve_stream(st.backend, stream);
        nb::gil_scoped_release release;
        ops::commit(s, spec.spec, st.storage, idx.idx, rows);
      },
      "spec"_a, "storage"_a, "indices"_a, nb::kw_only(), "rows"_a, "stream"_a.none() = nb::none(),
      "Two-phase: copy each row's accepted post-state into the pool, every layer.");
  m.def(
      "materialize",
      [](const PySpec& spec, const PyStorage& st, nb::handle slots_, nb::handle gates_, nb::handle stream) {
        Array slots = take(slots_, "slots");
        require_elem(slots, {Elem::i32});
        require_shape(slots, {-1});
        require_same_place(slots, st.pool.arrays[0]);
        std::vector<GateArrays> keep;
        std::vector<GateParams> gates;
        if (!gates_.is_none()) {
          const ModelShape& md = spec.spec.model;
          if (!nb::isinstance<nb::sequence>(gates_) || int64_t(nb::len(gates_)) != md.layers)
            throw InvalidArgument("gates", "gates must list one (A_log, dt_bias) pair per layer (" + std::to_string(md.layers) +
                                               "), got " + (nb::isinstance<nb::sequence>(gates_) ? std::to_string(nb::len(gates_)) : std::string("no list")));
          const nb::sequence list = nb::borrow<nb::sequence>(gates_);
          for (size_t l = 0; l < nb::len(list); ++l) {
            const std::string at = "gates[" + std::to_string(l) + "]";
            const nb::object pair = list[l];
            if (!nb::isinstance<nb::sequence>(pair) || nb::len(pair) != 2)
              throw InvalidArgument(at, at + " must be a pair (A_log, dt_bias)");
            keep.push_back(take_gate(pair[0], pair[1], at + ".A_log", at + ".dt_bias", md.value_heads, md.head_k, st.pool.arrays[0]));
            gates.push_back(GateParams{keep.back().A_log.as<const float>(), keep.back().dt_bias.as<const float>()});
          }
        }
        const Stream s = resolve_stream(st.backend, stream, slots_);
        nb::gil_scoped_release release;
        ops::materialize(s, spec.spec, st.storage, slots.as<const int32_t>(), int32_t(slots.dim(0)),
                         gates.empty() ? nullptr : gates.data());
      },
      "spec"_a, "storage"_a, nb::kw_only(), "slots"_a, "gates"_a.none() = nb::none(), "stream"_a.none() = nb::none(),
      "docs/modes.md materialize: pool[slot] = the slot's latest state, accept_len = 0, for each listed slot (int32, "
      "backend memory): fused-accept copies the accepted post-state from scratch; replay folds the slot's pending "
      "records into its checkpoint and sets ring_pending and ring_start to 0. Replay with the gate in the kernel "
      "needs gates: one (A_log, dt_bias) per layer, those the pending records were verified with (the ops cannot "
      "check it).");
}

}  // namespace kdagraph::python
