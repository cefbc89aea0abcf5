// Runs CPU rounds through the installed library's public API, so the install test fails if the package
// links but does not work: fused-accept against two-phase through two Verifiers, and a fused-accept
// round on buffers this program allocated itself (the operations of ops.hpp) against a Verifier.
#include <kdagraph/ops.hpp>
#include <kdagraph/verifier.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

namespace {

const kdagraph::Stream kCpu{kdagraph::Backend::cpu, nullptr};

// The same three rounds through a fused-accept and a two-phase Verifier: bitwise the same outputs and,
// after materialize, the same pools (docs/modes.md).
bool modes_agree() {
  const int L = 2, P = 4, T = 3, N = 2, row = 2 * 16 * 16;
  std::vector<float> q(N * T * 16), k(N * T * 16), v(N * T * 32), g(N * T * 32), beta(N * T * 2);
  for (int i = 0; i < N * T * 32; ++i) {
    v[i] = float(i % 11) / 11.0f - 0.3f;
    g[i] = -float(i % 7) / 9.0f;
    if (i < N * T * 16) q[i] = k[i] = float(i % 5) / 5.0f - 0.35f;
    if (i < N * T * 2) beta[i] = 0.25f + 0.125f * float(i % 3);
  }
  std::vector<float> initial(size_t(L) * row);
  for (size_t i = 0; i < initial.size(); ++i) initial[i] = float(i % 89) / 89.0f - 0.5f;
  const int32_t slots[N] = {2, 0};
  const int32_t accepted[3][N] = {{3, 1}, {2, 2}, {1, 3}};
  std::vector<float> outputs[2], pools[2];
  const kdagraph::Mode modes[2] = {kdagraph::Mode::fused_accept, kdagraph::Mode::two_phase};
  for (int m = 0; m < 2; ++m) {
    kdagraph::VerifierConfig c;
    c.model = {L, 1, 2, 16, 16};
    c.pool = {P, T, kdagraph::DType::f32};
    c.max_rows = N;
    c.tokens = T;
    c.mode = modes[m];
    kdagraph::Verifier verifier(c);
    for (int32_t slot : slots) verifier.prefill(kCpu, slot, initial.data());
    verifier.set_batch(kCpu, slots, N);
    std::vector<float> o(N * T * 32);
    for (int round = 0; round < 3; ++round) {
      kdagraph::LayerInputs in;
      in.q = q.data();
      in.k = k.data();
      in.v = v.data();
      in.g = g.data();
      in.beta = beta.data();
      in.o = o.data();
      verifier.enqueue_indices(kCpu, N);
      for (int l = 0; l < L; ++l) verifier.enqueue_verify(kCpu, l, in, N);
      verifier.enqueue_accept_from_host(kCpu, accepted[round], N);
      if (modes[m] == kdagraph::Mode::two_phase) verifier.enqueue_commit(kCpu, N);
      outputs[m].insert(outputs[m].end(), o.begin(), o.end());
    }
    verifier.enqueue_materialize(kCpu, slots, N);
    std::vector<float> state(size_t(L) * row);
    for (int32_t slot : slots) {
      verifier.read_pool(kCpu, slot, state.data());
      pools[m].insert(pools[m].end(), state.begin(), state.end());
    }
  }
  return outputs[0] == outputs[1] && pools[0] == pools[1] && pools[0] != std::vector<float>(pools[0].size(), 0.0f);
}

// Two rounds on the program's own pool [L, P, HV, V, K] and scratch [L, P * S, HV, V, K].
bool ops_agree_with_verifier() {
  kdagraph::VerifierConfig c;
  c.model = {2, 1, 2, 16, 16};
  c.pool = {4, 3, kdagraph::DType::f32};
  c.max_rows = 2;
  c.tokens = 3;
  const int L = 2, P = 4, S = 3, T = 3, N = 2, row = 2 * 16 * 16;
  alignas(16) static float pool[L * P * row], scratch[L * P * S * row];
  std::vector<int32_t> accept_len(P, 0), index(size_t(kdagraph::round_index_elems(N, T)));
  for (int i = 0; i < L * P * row; ++i) pool[i] = float(i % 97) / 97.0f - 0.5f;
  kdagraph::SlotStorage st;
  st.slots = P;
  st.scratch_steps = S;
  st.pool = kdagraph::state_view(pool, kdagraph::DType::f32, L, P * row, P, row);
  st.scratch = kdagraph::state_view(scratch, kdagraph::DType::f32, L, P * S * row, P * S, row);
  st.accept_len = accept_len.data();
  const kdagraph::RoundIndices idx = kdagraph::round_indices(index.data(), N, T);
  const kdagraph::RoundSpec spec = kdagraph::round_spec(c);

  kdagraph::Verifier v(c);
  std::vector<float> states(size_t(L) * row);
  for (int32_t slot = 0; slot < P; ++slot) {
    for (int l = 0; l < L; ++l) std::memcpy(&states[size_t(l) * row], &pool[(l * P + slot) * row], row * 4);
    v.prefill(kCpu, slot, states.data());
  }
  alignas(16) static float q[N * T * 16], k[N * T * 16], vv[N * T * 32], g[N * T * 32], beta[N * T * 2];
  alignas(16) static float o_ops[N * T * 32], o_ver[N * T * 32];
  for (int i = 0; i < N * T * 32; ++i) {
    vv[i] = float(i % 13) / 13.0f;
    g[i] = -float(i % 5) / 10.0f;
    if (i < N * T * 16) q[i] = k[i] = float(i % 7) / 7.0f - 0.4f;
    if (i < N * T * 2) beta[i] = 0.5f;
  }
  int32_t batch[1 + N] = {N, 3, 1};
  const int32_t accepted[N] = {2, 1};
  for (int round = 0; round < 2; ++round) {
    kdagraph::LayerInputs in;
    in.q = q;
    in.k = k;
    in.v = vv;
    in.g = g;
    in.beta = beta;
    in.o = o_ops;
    kdagraph::ops::build_indices(kCpu, spec, st, kdagraph::BatchView{batch + 1, batch, N}, idx);
    for (int l = 0; l < L; ++l) kdagraph::ops::verify_layer(kCpu, spec, st, idx, N, l, in);
    kdagraph::ops::accept(kCpu, spec, st, idx, N, accepted);
    v.set_batch(kCpu, batch + 1, N);
    in.o = o_ver;
    for (int l = 0; l < L; ++l) {
      if (l == 0) v.enqueue_indices(kCpu, N);
      v.enqueue_verify(kCpu, l, in, N);
    }
    v.enqueue_accept_from_host(kCpu, accepted, N);
    if (std::memcmp(o_ops, o_ver, sizeof o_ops) != 0) return false;
  }
  const int32_t slots[2] = {3, 1};
  kdagraph::ops::materialize(kCpu, spec, st, slots, 2);
  v.enqueue_materialize(kCpu, slots, 2);
  for (int32_t slot : slots) {
    v.read_pool(kCpu, slot, states.data());
    for (int l = 0; l < L; ++l)
      if (std::memcmp(&states[size_t(l) * row], &pool[(l * P + slot) * row], row * 4) != 0) return false;
  }
  return true;
}

}  // namespace

int main() {
  const bool modes = modes_agree(), ops = ops_agree_with_verifier();
  std::printf("consumer: %s; %s\n", modes ? "fused-accept == two-phase" : "MODES MISMATCH",
              ops ? "ops on own buffers == Verifier" : "OPS MISMATCH");
  return modes && ops ? 0 : 1;
}
