// docs/trees.md through the operations (graph/ops.cpp) on caller-owned buffers: rounds of token trees in
// fused-accept and two-phase modes, each row accepting a random root-to-node path (ops::accept_path).
// Every round is checked against the fp64 tree reference seeded from where docs/trees.md says the seed is
// (the accepted node's scratch row, or the pool after a commit), so a seed read from the wrong row
// fails; the accepted node's state is what commit and materialize move. Bad trees and paths from device
// memory are clamped and recorded; host-side misuse is refused by name and changes nothing. On the
// program's runner (tests/common/runner.h [TAG_RUNNERS]); the executor runs half the engines' rounds.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "harness/host_engine.h"
#include "kdagraph/ops.hpp"
#include "kdagraph/verifier.hpp"
#include "kernels/kda_math.h"
#include "tests/common/conv_reference.h"
#include "tests/common/engines.h"
#include "tests/common/reference.h"
#include "tests/common/runner.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

// The cases over TreeRounds keep their caller storage in host memory: the CPU backend's, and the
// executor's device memory; on a GPU the engine's cases run.
#define KDA_SKIP_UNLESS_HOST_STORAGE()                                                                   \
  do {                                                                                                   \
    KDA_SKIP_UNLESS_ROUNDS_RUN();                                                                        \
    if (runner().memory() != Backend::cpu) GTEST_SKIP() << "caller storage in host memory";              \
  } while (0)

float load(const std::vector<uint8_t>& bytes, DType t, int64_t i) {
  return math::load_as_f32(bytes.data(), t, i);
}

void store(std::vector<uint8_t>& bytes, DType t, int64_t i, float x) {
  if (t == DType::f32) std::memcpy(bytes.data() + 4 * i, &x, 4);
  else {
    const math::bf16 b = math::f32_to_bf16(x);
    std::memcpy(bytes.data() + 2 * i, &b, 2);
  }
}

// A round's worth of caller-owned buffers in host memory (the CPU backend's), L = 2, one slot per row.
struct TreeRounds {
  static constexpr int32_t L = 2, H = 1, HV = 2, K = 64, V = 64, P = 3, S = 8, N = 3, T = 7;
  RoundSpec spec;
  DType state;
  std::mt19937_64 rng;
  std::vector<uint8_t> pool, scratch;
  std::vector<int32_t> accept_len = std::vector<int32_t>(P, 0);
  std::vector<int32_t> index_storage = std::vector<int32_t>(size_t(round_index_elems(N, T)), 0);
  std::vector<int32_t> slots{2, 0, -1}, n_real{2}, parent, accept_index;
  DeviceErrorWord errors;
  SlotStorage storage;
  RoundIndices idx;
  BatchView batch;
  std::vector<std::vector<float>> q, k, v, g, beta, o;  // per layer
  const Stream s = runner().stream;

  static int64_t state_elems() { return int64_t(HV) * V * K; }

  TreeRounds(Mode mode, DType state_dtype, uint64_t seed) : state(state_dtype), rng(seed) {
    spec.model = ModelShape{L, H, HV, K, V};
    spec.tokens = T;
    spec.mode = mode;
    spec.trees = true;
    spec.options.l2norm_qk = true;
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    const size_t es = dtype_size(state);
    pool.resize(size_t(L * P * state_elems()) * es);
    scratch.resize(size_t(L * P * S * state_elems()) * es);
    for (int64_t i = 0; i < L * P * state_elems(); ++i) store(pool, state, i, d(rng));
    for (int64_t i = 0; i < L * P * S * state_elems(); ++i) store(scratch, state, i, d(rng));
    storage.slots = P;
    storage.scratch_steps = S;
    storage.pool = state_view(pool.data(), state, L, P * state_elems(), P, state_elems());
    storage.scratch = state_view(scratch.data(), state, L, P * S * state_elems(), P * S, state_elems());
    storage.accept_len = accept_len.data();
    storage.errors = &errors;
    idx = round_indices(index_storage.data(), N, T);
    batch.slots = slots.data();
    batch.n_real = n_real.data();
    batch.rows = N;
    parent.assign(size_t(N) * T, -1);
    accept_index.assign(size_t(N) * T, -1);
    batch.parent = parent.data();
    for (auto* x : {&q, &k, &v, &g, &beta, &o}) x->resize(L);
  }

  void new_inputs() {
    std::uniform_real_distribution<float> d(-1.0f, 1.0f), gd(-0.5f, 0.0f), bd(0.05f, 0.95f);
    for (int32_t l = 0; l < L; ++l) {
      auto fill = [&](std::vector<float>& x, size_t n, auto& dist) {
        x.resize(n);
        for (float& e : x) e = dist(rng);
      };
      fill(q[l], size_t(N) * T * H * K, d);
      fill(k[l], size_t(N) * T * H * K, d);
      fill(v[l], size_t(N) * T * HV * V, d);
      fill(g[l], size_t(N) * T * HV * K, gd);
      fill(beta[l], size_t(N) * T * HV, bd);
      o[l].assign(size_t(N) * T * HV * V, std::nanf(""));  // poisoned: every output must be written
    }
    for (int32_t n = 0; n < N; ++n) {
      const std::vector<int32_t> tree = random_tree(rng, T);
      std::copy(tree.begin(), tree.end(), parent.begin() + n * T);
    }
  }

  LayerInputs inputs(int32_t l) {
    LayerInputs in;
    in.q = q[l].data();
    in.k = k[l].data();
    in.v = v[l].data();
    in.g = g[l].data();
    in.beta = beta[l].data();
    in.o = o[l].data();
    return in;
  }

  // Where slot `slot`'s seed of layer l is, as docs/modes.md, docs/trees.md say, in fp64.
  std::vector<double> seed_of(int32_t slot, int32_t l, int32_t h) const {
    const bool from_scratch = spec.mode == Mode::fused_accept && accept_len[size_t(slot)] > 0;
    const std::vector<uint8_t>& src = from_scratch ? scratch : pool;
    const int64_t row = from_scratch ? int64_t(slot) * S + accept_len[size_t(slot)] - 1 : slot;
    const int64_t rows = from_scratch ? int64_t(P) * S : P;
    std::vector<double> out(size_t(V) * K);
    const int64_t base = (l * rows + row) * state_elems() + int64_t(h) * V * K;
    for (size_t e = 0; e < out.size(); ++e) out[e] = load(src, state, base + int64_t(e));
    return out;
  }

  std::vector<double> state_row(const std::vector<uint8_t>& src, int64_t rows, int32_t l, int64_t row, int32_t h) const {
    std::vector<double> out(size_t(V) * K);
    const int64_t base = (l * rows + row) * state_elems() + int64_t(h) * V * K;
    for (size_t e = 0; e < out.size(); ++e) out[e] = load(src, state, base + int64_t(e));
    return out;
  }

  // One round: verify, check against fp64 from the seeds, accept a random path per row (and commit).
  // Returns each real row's accepted node.
  std::vector<int32_t> round(double tol) {
    new_inputs();
    struct Ref {
      std::vector<std::vector<double>> out, posts;
    };
    std::vector<Ref> refs;  // [n][l][h]
    for (int32_t n = 0; n < N; ++n)
      for (int32_t l = 0; l < L; ++l)
        for (int32_t h = 0; h < HV; ++h) {
          Ref r;
          if (slots[size_t(n)] >= 0) {
            RefHeadInputs in;
            for (int32_t t = 0; t < T; ++t) {
              const size_t tok = size_t(n) * T + size_t(t);
              auto at = [](const std::vector<float>& x, size_t from, int len) {
                return std::vector<double>(x.begin() + ptrdiff_t(from), x.begin() + ptrdiff_t(from) + len);
              };
              in.q.push_back(at(q[l], tok * H * K, K));
              in.k.push_back(at(k[l], tok * H * K, K));
              in.v.push_back(at(v[l], (tok * HV + size_t(h)) * V, V));
              in.g.push_back(at(g[l], (tok * HV + size_t(h)) * K, K));
              in.beta.push_back(beta[l][tok * HV + size_t(h)]);
            }
            RefOptions opt = ref_options(spec.options);
            r.out = ref_verify_tree_head(opt, K, V, seed_of(slots[size_t(n)], l, h), in, parent.data() + n * T,
                                         r.posts);
          }
          refs.push_back(r);
        }

    ops::build_indices(s, spec, storage, batch, idx);
    for (int32_t l = 0; l < L; ++l) ops::verify_layer(s, spec, storage, idx, N, l, inputs(l), &batch);

    for (int32_t n = 0; n < N; ++n)
      for (int32_t l = 0; l < L; ++l)
        for (int32_t h = 0; h < HV; ++h) {
          const Ref& r = refs[size_t((n * L + l) * HV + h)];
          for (int32_t t = 0; t < T; ++t) {
            std::vector<double> got(static_cast<size_t>(V));
            for (int32_t j = 0; j < V; ++j) got[size_t(j)] = o[l][((size_t(n) * T + size_t(t)) * HV + size_t(h)) * V + size_t(j)];
            if (slots[size_t(n)] < 0) {
              for (double x : got) EXPECT_EQ(x, 0.0) << "padded row n=" << n;
              continue;
            }
            EXPECT_LE(rel_error(got, r.out[size_t(t)]), tol) << "output n=" << n << " l=" << l << " h=" << h << " t=" << t;
            const int64_t row = int64_t(slots[size_t(n)]) * S + t;
            EXPECT_LE(rel_error(state_row(scratch, int64_t(P) * S, l, row, h), r.posts[size_t(t)]), tol)
                << "post-state n=" << n << " l=" << l << " h=" << h << " t=" << t;
          }
        }

    // The sampler: a random node per row, and its root-to-node path.
    std::vector<int32_t> node(size_t(N), -1);
    std::fill(accept_index.begin(), accept_index.end(), -1);
    for (int32_t n = 0; n < N; ++n) {
      node[size_t(n)] = int32_t(rng() % T);
      std::vector<int32_t> path;
      for (int32_t t = node[size_t(n)]; t >= 0; t = parent[size_t(n * T + t)]) path.insert(path.begin(), t);
      std::copy(path.begin(), path.end(), accept_index.begin() + n * T);
    }
    ops::accept_path(s, spec, storage, idx, N, accept_index.data());
    if (spec.mode == Mode::two_phase) ops::commit(s, spec, storage, idx, N);
    return node;
  }
};

class TreeRoundsTest : public ::testing::TestWithParam<std::tuple<Mode, DType>> {};

TEST_P(TreeRoundsTest, EachRoundSeedsFromTheAcceptedNode) {
  KDA_SKIP_UNLESS_HOST_STORAGE();
  const Mode mode = std::get<0>(GetParam());
  const DType state = std::get<1>(GetParam());
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(std::string(to_string(mode)) + " state=" + to_string(state) + " seed=" + std::to_string(seed));
  TreeRounds r(mode, state, seed);
  const double tol = state == DType::f32 ? 1e-5 : 1e-2;
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // Rows take turns being padding, so slots go a round without a verify.
    r.slots.assign(round % 2 ? std::initializer_list<int32_t>{0, 1, -1} : std::initializer_list<int32_t>{2, 0, -1});
    const std::vector<int32_t> node = r.round(tol);
    if (HasFatalFailure()) return;
    for (int32_t n = 0; n < 2; ++n) {
      const int32_t slot = r.slots[size_t(n)];
      if (mode == Mode::fused_accept) {
        EXPECT_EQ(r.accept_len[size_t(slot)], node[size_t(n)] + 1) << "slot " << slot;
      } else {  // the commit moved the node's post-state into the pool, bit for bit
        for (int32_t l = 0; l < TreeRounds::L; ++l)
          for (int32_t h = 0; h < TreeRounds::HV; ++h)
            EXPECT_EQ(r.state_row(r.pool, TreeRounds::P, l, slot, h),
                      r.state_row(r.scratch, int64_t(TreeRounds::P) * TreeRounds::S, l,
                                  int64_t(slot) * TreeRounds::S + node[size_t(n)], h))
                << "slot " << slot << " layer " << l;
      }
    }
  }
  EXPECT_EQ(r.errors.count, 0u) << to_string(DeviceErrorCode(r.errors.code));
  if (mode != Mode::fused_accept) return;
  // Materialize moves each slot's accepted node state into the pool.
  const std::vector<int32_t> all{0, 1, 2};
  std::vector<std::vector<double>> nodes;
  for (int32_t slot : all)
    for (int32_t l = 0; l < TreeRounds::L; ++l)
      for (int32_t h = 0; h < TreeRounds::HV; ++h) nodes.push_back(r.seed_of(slot, l, h));
  ops::materialize(r.s, r.spec, r.storage, all.data(), 3);
  size_t i = 0;
  for (int32_t slot : all)
    for (int32_t l = 0; l < TreeRounds::L; ++l)
      for (int32_t h = 0; h < TreeRounds::HV; ++h)
        EXPECT_EQ(r.state_row(r.pool, TreeRounds::P, l, slot, h), nodes[i++]) << "slot " << slot;
}

INSTANTIATE_TEST_SUITE_P(Modes, TreeRoundsTest,
                         ::testing::Combine(::testing::Values(Mode::fused_accept, Mode::two_phase),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         [](const auto& p) {
                           return std::string(std::get<0>(p.param) == Mode::fused_accept ? "fused_accept" : "two_phase") +
                                  "_" + to_string(std::get<1>(p.param));
                         });

// From device memory, a parent outside [-1, t) is read as t - 1 by the index build (recorded), and a
// path that leaves the tree is cut at its first bad node (recorded): the accept length names the last
// good node.
TEST(Trees, BadParentsAndPathsFromDeviceMemoryAreClampedAndRecorded) {
  KDA_SKIP_UNLESS_HOST_STORAGE();
  TreeRounds r(Mode::fused_accept, DType::f32, fresh_seed());
  const int32_t T = TreeRounds::T;
  r.new_inputs();
  for (int32_t n = 0; n < TreeRounds::N; ++n)
    for (int32_t t = 0; t < T; ++t) r.parent[size_t(n * T + t)] = t == 0 ? -1 : 0;  // a star around token 0
  r.parent[size_t(T + 3)] = 5;  // row 1, token 3: not an earlier token
  ops::build_indices(r.s, r.spec, r.storage, r.batch, r.idx);
  EXPECT_EQ(r.idx.parent[T + 3], 2) << "read as t - 1";
  EXPECT_EQ(r.idx.parent[T + 4], 0);
  EXPECT_EQ(DeviceErrorCode(r.errors.code), DeviceErrorCode::parent_out_of_range);
  EXPECT_EQ(r.errors.row, 1);
  EXPECT_EQ(r.errors.value, 5);
  clear_device_errors(&r.errors);

  std::fill(r.accept_index.begin(), r.accept_index.end(), -1);
  r.accept_index[0] = 0;  // row 0: 0 -> 4 -> 2, but 2 is no child of 4
  r.accept_index[1] = 4;
  r.accept_index[2] = 2;
  r.accept_index[T + 0] = 3;  // row 1: does not start at the root
  ops::accept_path(r.s, r.spec, r.storage, r.idx, TreeRounds::N, r.accept_index.data());
  EXPECT_EQ(r.accept_len[2], 5) << "row 0 (slot 2) keeps 0 -> 4";
  EXPECT_EQ(r.accept_len[0], 1) << "row 1 (slot 0) keeps the root";
  EXPECT_EQ(DeviceErrorCode(r.errors.code), DeviceErrorCode::path_invalid);
  EXPECT_EQ(r.errors.count, 2u);
}

// Host-side misuse is refused naming the argument, before anything changes.
TEST(Trees, MisuseIsRefusedByNameAndChangesNothing) {
  KDA_SKIP_UNLESS_HOST_STORAGE();
  TreeRounds r(Mode::fused_accept, DType::f32, fresh_seed());
  r.new_inputs();
  const std::vector<int32_t> indices_before = r.index_storage, accept_before = r.accept_len;
  auto expect_refused = [&](const char* argument, auto call) {
    try {
      call();
      ADD_FAILURE() << "not refused: " << argument;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
    EXPECT_EQ(r.index_storage, indices_before) << argument;
    EXPECT_EQ(r.accept_len, accept_before) << argument;
  };
  RoundSpec chains = r.spec;
  chains.trees = false;
  expect_refused("batch.parent", [&] { ops::build_indices(r.s, chains, r.storage, r.batch, r.idx); });
  expect_refused("spec.trees", [&] { ops::accept_path(r.s, chains, r.storage, r.idx, 3, r.accept_index.data()); });
  expect_refused("accept_index", [&] { ops::accept_path(r.s, r.spec, r.storage, r.idx, 3, nullptr); });
  RoundIndices no_parent = r.idx;
  no_parent.parent = nullptr;
  expect_refused("idx.parent", [&] { ops::verify_layer(r.s, r.spec, r.storage, no_parent, 3, 0, r.inputs(0)); });
}

// The host engine with top-K trees (HostEngineConfig::tree): K = V = 64 (a shape the CUDA kernels have,
// for the SIMT build), T = 6.
HostEngineConfig tree_engine(Mode mode, Exec exec, int32_t tree, uint64_t seed) {
  HostEngineConfig c = small_engine(runner().memory(), mode, exec, seed);
  c.verifier.model = ModelShape{2, 1, 2, 64, 64};
  c.verifier.tokens = 6;
  c.verifier.pool.scratch_steps = 6;
  c.tree = tree;
  return c;
}

struct EngineRun {
  std::vector<RoundRecord> rounds;
  std::vector<RetiredRequest> retired;
  int64_t tokens = 0;
  uint32_t device_errors = 0;
};

EngineRun run_engine(const HostEngineConfig& c, int32_t rounds) {
  const Stream& s = runner().stream;
  HostEngine e(c);
  e.start(s);
  for (int32_t r = 0; r < rounds; ++r) e.run_round(s);
  e.finish(s);
  return EngineRun{e.rounds(), e.retired(), e.tokens_accepted(), e.verifier().device_errors().count};
}

void expect_same_runs(const EngineRun& got, const EngineRun& want, const std::string& what) {
  ASSERT_EQ(got.rounds.size(), want.rounds.size()) << what;
  for (size_t r = 0; r < want.rounds.size(); ++r) {
    ASSERT_EQ(got.rounds[r].slots, want.rounds[r].slots) << what << " round " << r;
    ASSERT_EQ(first_difference(got.rounds[r].outputs, want.rounds[r].outputs), -1) << what << " round " << r;
  }
  ASSERT_EQ(got.retired.size(), want.retired.size()) << what;
  for (size_t i = 0; i < want.retired.size(); ++i)
    EXPECT_EQ(first_difference(got.retired[i].state, want.retired[i].state), -1) << what << " retired " << i;
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.device_errors, 0u) << what;
}

// docs/trees.md through the Verifier and the graph runner: fused-accept graphs with the drafter and sampler
// inside, eager rounds with the sampler outside, and the two-phase reference see the same trees and
// paths and agree bitwise on every round's outputs and every retired state.
TEST(TreeEngine, ModesExecutionsAndSamplersAgreeBitwise) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const int32_t rounds = by_matrix(24, 12, 0);
  const EngineRun reference = run_engine(tree_engine(Mode::two_phase, Exec::eager, 3, seed), rounds);
  EXPECT_GT(reference.tokens, int64_t(reference.rounds.size())) << "some drafts are accepted";
  expect_same_runs(run_engine(tree_engine(Mode::fused_accept, Exec::graph, 3, seed), rounds), reference,
                   "fused-accept graph");
  HostEngineConfig outside = tree_engine(Mode::fused_accept, Exec::eager, 3, seed);
  outside.runner.sampler_in_graph = false;
  expect_same_runs(run_engine(outside, rounds), reference, "fused-accept eager, sampler outside");
  HostEngineConfig two_phase_graph = tree_engine(Mode::two_phase, Exec::graph, 3, seed);
  expect_same_runs(run_engine(two_phase_graph, rounds), reference, "two-phase graph");
  // Replay keeps no per-token states: it replays the kept path's cached tokens in path order.
  expect_same_runs(run_engine(tree_engine(Mode::replay, Exec::graph, 3, seed), rounds), reference, "replay graph");
  HostEngineConfig replay_outside = tree_engine(Mode::replay, Exec::eager, 3, seed);
  replay_outside.runner.sampler_in_graph = false;
  expect_same_runs(run_engine(replay_outside, rounds), reference, "replay eager, sampler outside");
}

// A top-1 tree is a chain, and the sampler accepts down it with the chain sampler's draws: the engine is
// bitwise the engine without trees.
TEST(TreeEngine, ATopOneTreeIsBitwiseTheChain) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const int32_t rounds = by_matrix(16, 8, 0);
  expect_same_runs(run_engine(tree_engine(Mode::fused_accept, Exec::graph, 1, seed), rounds),
                   run_engine(tree_engine(Mode::fused_accept, Exec::graph, 0, seed), rounds), "top-1 trees");
}

// Trees from the host are checked by name before anything runs, and so are paths from the host
// against the tree set_tree wrote.
TEST(TreeEngine, TreesAndPathsFromTheHostAreCheckedByName) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const Stream& s = runner().stream;
  VerifierConfig c = tree_engine(Mode::fused_accept, Exec::eager, 2, 1).verifier;
  auto expect_refused = [](const char* argument, auto call) {
    try {
      call();
      ADD_FAILURE() << "not refused: " << argument;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
  };
  {
    Verifier chains(c);
    const int32_t slots[1] = {0};
    chains.set_batch(s, slots, 1);
    const std::vector<int32_t> chain{-1, 0, 1, 2, 3, 4};
    expect_refused("parent", [&] { chains.set_tree(s, chain.data(), 1); });
    expect_refused("accept_index", [&] { chains.enqueue_accept_path_from_host(s, chain.data(), 1); });
  }
  c.trees = true;
  Verifier v(c);
  const int32_t slots[2] = {3, 1};
  v.set_batch(s, slots, 2);
  const std::vector<int32_t> tree{-1, 0, 0, 1, -1, 4, /* row 1 */ -1, 0, 1, 2, 3, 4};
  const std::vector<int32_t> before(v.batch_buffers().parent, v.batch_buffers().parent + 12);
  std::vector<int32_t> bad = tree;
  bad[8] = 2;  // row 1, token 2: not an earlier token
  expect_refused("parent[1][2]", [&] { v.set_tree(s, bad.data(), 2); });
  bad = tree;
  bad[0] = 0;
  expect_refused("parent[0][0]", [&] { v.set_tree(s, bad.data(), 2); });
  EXPECT_EQ(std::vector<int32_t>(v.batch_buffers().parent, v.batch_buffers().parent + 12), before)
      << "a refused tree changed the verifier's";
  v.set_tree(s, tree.data(), 2);
  EXPECT_EQ(std::vector<int32_t>(v.batch_buffers().parent, v.batch_buffers().parent + 12), tree);
  const std::vector<int32_t> good{4, 5, -1, -1, -1, -1, /* row 1 */ 0, 1, 2, -1, -1, -1};
  std::vector<int32_t> path = good;
  path[1] = 3;  // row 0: 3 is no child of 4
  expect_refused("accept_index[0][1]", [&] { v.enqueue_accept_path_from_host(s, path.data(), 2); });
  path = good;
  path[10] = 5;  // row 1: a node after the path's end
  expect_refused("accept_index[1][4]", [&] { v.enqueue_accept_path_from_host(s, path.data(), 2); });
  path = good;
  path[6] = 1;  // row 1: 1 is no child of the seed
  expect_refused("accept_index[1][0]", [&] { v.enqueue_accept_path_from_host(s, path.data(), 2); });
  EXPECT_EQ(std::vector<int32_t>(v.accept_len(), v.accept_len() + c.pool.slots),
            std::vector<int32_t>(size_t(c.pool.slots), 0))
      << "a refused path changed an accept length";
  v.enqueue_indices(s, 2);
  v.enqueue_accept_path_from_host(s, good.data(), 2);
  EXPECT_EQ(v.accept_len()[3], 6) << "row 0 accepted 4 -> 5";
  EXPECT_EQ(v.accept_len()[1], 3) << "row 1 accepted 0 -> 1 -> 2";
  EXPECT_EQ(v.device_errors().count, 0u);
}

// docs/trees.md's conv of token trees through ops::conv_layer, against tests/common/conv_reference.h: token
// t's window is its ancestors' inputs after the slot's history, and the next round's history is the
// accepted path's. Fused accept reads it through the kept path in the conv state's halves, two-phase
// from the committed conv scratch row of the accepted node; rounds of random trees and paths, then a
// materialize (fused accept) that must leave exactly the reference's window at columns [0, W - 1).
class ConvTreeRounds : public ::testing::TestWithParam<std::tuple<Mode, DType>> {};

TEST_P(ConvTreeRounds, MatchTheReference) {
  KDA_SKIP_UNLESS_HOST_STORAGE();
  const Mode mode = std::get<0>(GetParam());  // plain locals: clang does not let a lambda capture a binding
  const DType io = std::get<1>(GetParam());
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(std::string(to_string(mode)) + " io=" + to_string(io) + " seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  constexpr int32_t N = 3, P = 3, T = 6, S = 6, W = 4;
  RoundSpec spec;
  spec.model = ModelShape{1, 1, 1, 16, 16};
  spec.tokens = T;
  spec.io_dtype = io;
  spec.mode = mode;
  spec.trees = true;
  spec.conv = ConvShape{conv_channels(spec.model), W, ConvActivation::silu};
  const int32_t C = spec.conv.channels;
  const size_t es = dtype_size(io);
  const int64_t state = int64_t(spec.model.value_heads) * spec.model.head_v * spec.model.head_k;
  std::vector<float> pool(size_t(P * state), 0.5f), scratch(size_t(P * S * state), 0.5f);
  const int64_t conv_row = conv_state_row_elems(spec, S), conv_scratch_row = conv_scratch_row_elems(spec);
  std::vector<uint8_t> conv_state(size_t(P * conv_row) * es, 0), conv_scratch(size_t(P * S * conv_scratch_row) * es, 0);
  std::vector<int32_t> accept_len(P, 0), parity(P, 0), kept(size_t(P) * T, -1);
  std::vector<int32_t> index_storage(size_t(round_index_elems(N, T)));
  DeviceErrorWord errors;
  SlotStorage st;
  st.slots = P;
  st.scratch_steps = S;
  st.pool = state_view(pool.data(), DType::f32, 1, P * state, P, state);
  st.scratch = state_view(scratch.data(), DType::f32, 1, P * S * state, P * S, state);
  st.accept_len = accept_len.data();
  st.round_parity = parity.data();
  st.conv_state = state_view(conv_state.data(), io, 1, P * conv_row, P, conv_row);
  if (mode == Mode::two_phase)
    st.conv_scratch = state_view(conv_scratch.data(), io, 1, P * S * conv_scratch_row, P * S, conv_scratch_row);
  st.accept_path = kept.data();
  st.errors = &errors;
  const RoundIndices idx = round_indices(index_storage.data(), N, T);
  std::vector<int32_t> slots{1, 2, -1}, n_real{2}, parent(size_t(N) * T), path(size_t(N) * T);
  BatchView batch{slots.data(), n_real.data(), N, parent.data()};

  RefConv ref;
  ref.channels = C;
  ref.width = W;
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> weight(size_t(C) * W);
  for (float& w : weight) w = d(rng);
  ref.weight.assign(weight.begin(), weight.end());
  // Each slot's history as the reference keeps it: zeros, as the state starts.
  std::vector<std::vector<std::vector<double>>> history(P, std::vector<std::vector<double>>(W - 1, std::vector<double>(size_t(C), 0.0)));
  auto value = [&](const std::vector<uint8_t>& bytes, int64_t i) { return double(math::load_as_f32(bytes.data(), io, i)); };
  std::vector<uint8_t> x(size_t(N) * T * C * es), y(size_t(N) * T * C * es);
  for (int round = 0; round < 8; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    slots.assign(round % 2 ? std::initializer_list<int32_t>{0, 2, -1} : std::initializer_list<int32_t>{1, 2, -1});
    for (int64_t i = 0; i < int64_t(N) * T * C; ++i) {
      const float v = d(rng);
      if (io == DType::f32) std::memcpy(x.data() + 4 * i, &v, 4);
      else {
        const math::bf16 b = math::f32_to_bf16(v);
        std::memcpy(x.data() + 2 * i, &b, 2);
      }
    }
    std::fill(y.begin(), y.end(), uint8_t(0xff));
    for (int32_t n = 0; n < N; ++n) {
      const std::vector<int32_t> tree = random_tree(rng, T);
      std::copy(tree.begin(), tree.end(), parent.begin() + n * T);
    }
    ops::build_indices(Stream{}, spec, st, batch, idx);
    ConvLayerInputs in;
    in.x = x.data();
    in.weight = weight.data();
    in.out[0] = ConvOutputSegment{C, y.data()};
    ops::conv_layer(Stream{}, spec, st, idx, N, 0, in);
    std::vector<double> got, want;
    for (int32_t n = 0; n < 2; ++n) {
      const int32_t slot = slots[size_t(n)];
      auto input = [&](int32_t t) {
        std::vector<double> v(static_cast<size_t>(C));
        for (int32_t c = 0; c < C; ++c) v[size_t(c)] = value(x, (int64_t(n) * T + t) * C + c);
        return v;
      };
      auto ancestors = [&](int32_t t) {
        std::vector<std::vector<double>> xs;
        for (; t >= 0; t = parent[size_t(n * T + t)]) xs.insert(xs.begin(), input(t));
        return xs;
      };
      for (int32_t t = 0; t < T; ++t) {
        const std::vector<double> ref_y = ref_conv(ref, history[size_t(slot)], ancestors(t)).back();
        for (int32_t c = 0; c < C; ++c) {
          got.push_back(value(y, (int64_t(n) * T + t) * C + c));
          want.push_back(ref_y[size_t(c)]);
        }
      }
      // The sampler accepts a random node's path.
      const int32_t node = int32_t(rng() % T);
      std::vector<int32_t> nodes;
      for (int32_t t = node; t >= 0; t = parent[size_t(n * T + t)]) nodes.insert(nodes.begin(), t);
      std::fill(path.begin() + n * T, path.begin() + (n + 1) * T, -1);
      std::copy(nodes.begin(), nodes.end(), path.begin() + n * T);
      history[size_t(slot)] = ref_after_accept(history[size_t(slot)], ancestors(node), int(nodes.size()));
    }
    EXPECT_LE(rel_error(got, want), io == DType::f32 ? 1e-5 : 1e-2) << "outputs";
    ops::accept_path(Stream{}, spec, st, idx, N, path.data());
    if (mode == Mode::two_phase) ops::commit(Stream{}, spec, st, idx, N);
  }
  EXPECT_EQ(errors.count, 0u) << to_string(DeviceErrorCode(errors.code));
  // The state's window, moved to columns [0, W - 1) where the mode keeps it elsewhere: exactly the
  // reference's history.
  const std::vector<int32_t> all{0, 1, 2};
  ops::materialize(Stream{}, spec, st, all.data(), 3);
  for (int32_t slot = 0; slot < P; ++slot)
    for (int32_t j = 0; j < W - 1; ++j)
      for (int32_t c = 0; c < C; ++c)
        ASSERT_EQ(value(conv_state, slot * conv_row + int64_t(j) * C + c), history[size_t(slot)][size_t(j)][size_t(c)])
            << "slot " << slot << " column " << j << " channel " << c;
}

INSTANTIATE_TEST_SUITE_P(Modes, ConvTreeRounds,
                         ::testing::Combine(::testing::Values(Mode::fused_accept, Mode::two_phase),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         [](const auto& p) {
                           return std::string(std::get<0>(p.param) == Mode::fused_accept ? "fused_accept" : "two_phase") +
                                  "_" + to_string(std::get<1>(p.param));
                         });

// With the conv, the modes, executions and samplers agree bitwise too, the conv fused into each layer's
// verify (one kernel per layer) or not: the fused-accept halves read the history through the kept path,
// two-phase commits the accepted node's conv scratch row, replay replays the path. T = 6 fits one staging
// chunk of the CUDA kernel; T = 12 crosses into a second, where a token's ancestors may lie in the first.
TEST(TreeEngine, WithTheConvModesAndExecutionsAgreeBitwise) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  for (int32_t T : {6, 12}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("T=" + std::to_string(T) + " seed=" + std::to_string(seed));
    auto engine = [&](Mode mode, Exec exec, bool fuse) {
      HostEngineConfig c = with_conv(tree_engine(mode, exec, 3, seed));
      c.verifier.tokens = c.verifier.pool.scratch_steps = T;
      c.verifier.fuse_conv = fuse;
      return c;
    };
    const int32_t rounds = by_matrix(16, 8, 0);
    const EngineRun reference = run_engine(engine(Mode::two_phase, Exec::eager, false), rounds);
    expect_same_runs(run_engine(engine(Mode::fused_accept, Exec::graph, true), rounds), reference,
                     "fused-accept graph, conv fused");
    expect_same_runs(run_engine(engine(Mode::two_phase, Exec::graph, true), rounds), reference,
                     "two-phase graph, conv fused");
    expect_same_runs(run_engine(engine(Mode::replay, Exec::graph, true), rounds), reference, "replay graph, conv fused");
    HostEngineConfig outside = engine(Mode::fused_accept, Exec::eager, false);
    outside.runner.sampler_in_graph = false;
    expect_same_runs(run_engine(outside, rounds), reference, "fused-accept eager, sampler outside, conv unfused");
    if (HasFailure()) return;
  }
}

// docs/python.md, docs/trees.md: short_conv with token trees (in place, SGLang's layout): each call's tree, and the path
// the call before accepted, against the fp64 conv reference; a call given chains and no path is bitwise
// the call without either.
TEST(ShortConvTrees, MatchTheReferenceOverCalls) {
  KDA_SKIP_UNLESS_HOST_STORAGE();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  constexpr int32_t B = 2, T = 5, S = 5, W = 4, C = 8;
  const int64_t columns = W - 2 + S;
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> state(size_t(B * columns * C)), weight(size_t(C * W)), x(size_t(B * T * C)), y(x.size());
  for (float& v : state) v = d(rng);
  for (float& v : weight) v = d(rng);
  RefConv ref;
  ref.channels = C;
  ref.width = W;
  ref.weight.assign(weight.begin(), weight.end());
  auto column = [&](int32_t b, int64_t j) {
    return std::vector<double>(state.begin() + (b * columns + j) * C, state.begin() + (b * columns + j + 1) * C);
  };
  std::vector<std::vector<std::vector<double>>> history(B);
  for (int32_t b = 0; b < B; ++b)
    for (int32_t j = 0; j < W - 1; ++j) history[size_t(b)].push_back(column(b, j));
  std::vector<int32_t> indices{1, 0}, accepted(B, 0), parent(size_t(B * T)), path(size_t(B * T), -1);
  DeviceErrorWord errors;
  ShortConvCall call;
  call.conv = ConvShape{C, W, ConvActivation::silu};
  call.batch = B;
  call.tokens = T;
  call.scratch_steps = S;
  call.x = x.data();
  call.weight = weight.data();
  call.y = y.data();
  call.conv_state = state_view(state.data(), DType::f32, 1, B * columns * C, B, columns * C);
  call.state_indices = indices.data();
  call.num_accepted = accepted.data();
  call.parent = parent.data();
  call.errors = &errors;
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE("call " + std::to_string(round));
    for (float& v : x) v = d(rng);
    for (int32_t b = 0; b < B; ++b) {
      const std::vector<int32_t> tree = random_tree(rng, T);
      std::copy(tree.begin(), tree.end(), parent.begin() + b * T);
    }
    call.accept_index = round == 0 ? nullptr : path.data();
    ops::short_conv(Stream{}, call);
    std::vector<double> got, want;
    for (int32_t b = 0; b < B; ++b) {
      const int32_t row = indices[size_t(b)];
      auto ancestors = [&](int32_t t) {
        std::vector<std::vector<double>> xs;
        for (; t >= 0; t = parent[size_t(b * T + t)])
          xs.insert(xs.begin(), std::vector<double>(x.begin() + (b * T + t) * C, x.begin() + (b * T + t + 1) * C));
        return xs;
      };
      for (int32_t t = 0; t < T; ++t) {
        const std::vector<double> ref_y = ref_conv(ref, history[size_t(row)], ancestors(t)).back();
        for (int32_t c = 0; c < C; ++c) {
          got.push_back(y[size_t((b * T + t) * C + c)]);
          want.push_back(ref_y[size_t(c)]);
        }
      }
      const int32_t node = int32_t(rng() % T);
      std::vector<int32_t> nodes;
      for (int32_t t = node; t >= 0; t = parent[size_t(b * T + t)]) nodes.insert(nodes.begin(), t);
      std::fill(path.begin() + b * T, path.begin() + (b + 1) * T, -1);
      std::copy(nodes.begin(), nodes.end(), path.begin() + b * T);
      accepted[size_t(b)] = node + 1;
      history[size_t(row)] = ref_after_accept(history[size_t(row)], ancestors(node), int(nodes.size()));
    }
    EXPECT_LE(rel_error(got, want), 1e-5) << "outputs";
  }
  EXPECT_EQ(errors.count, 0u);

  // Chains given as trees, with an accepted path that is a chain's prefix: bitwise the chain call.
  std::vector<float> chain_state = state, chain_y(y.size());
  for (int32_t b = 0; b < B; ++b)
    for (int32_t t = 0; t < T; ++t) {
      parent[size_t(b * T + t)] = t - 1;
      path[size_t(b * T + t)] = t < accepted[size_t(b)] ? t : -1;
    }
  for (float& v : x) v = d(rng);
  ShortConvCall chain = call;
  chain.parent = nullptr;
  chain.accept_index = nullptr;
  chain.y = chain_y.data();
  chain.conv_state.base = chain_state.data();
  call.accept_index = path.data();
  ops::short_conv(Stream{}, call);
  ops::short_conv(Stream{}, chain);
  EXPECT_EQ(first_difference(y, chain_y), -1);
  EXPECT_EQ(first_difference(state, chain_state), -1);
}

}  // namespace
}  // namespace kdagraph::test
