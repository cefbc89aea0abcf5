// docs/cli.md: the command line's synthetic inputs, sampler and joining states on the program's runner
// (tests/common/runner.h [TAG_RUNNERS]): every element written, padded rows as docs/cli.md says, the joining
// state element for element the counter-based hash's, and, off the CPU, the CPU twin bitwise (the
// `--check` reference regenerates exactly these values).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/synthetic.h"
#include "tests/common/runner.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

bool cpu_runner() { return runner().kind == RunnerKind::cpu; }

TEST(Synthetic, InputsAreWrittenAndMatchTheCpu) {
  KDA_SKIP_WITHOUT_RUNNER();
  for (DType io : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(to_string(io));
    const std::vector<int64_t> round{7};
    const std::vector<int32_t> slots{5, 2, 9, -1}, n_real{3};
    SyntheticInputParams p;
    p.seed = fresh_seed();
    p.rows = 4;
    p.tokens = 3;
    p.heads = 2;
    p.value_heads = 4;
    p.head_k = p.head_v = 64;
    p.layer = 3;
    p.io_dtype = io;
    p.raw_gate = true;
    p.beta_logit = true;
    const size_t es = dtype_size(io), tok = size_t(p.rows) * p.tokens;
    const size_t qk = tok * 2 * 64 * es, vv = tok * 4 * 64 * es, bb = tok * 4 * es;
    std::vector<uint8_t> got(2 * qk + 2 * vv + bb, 0xff), cpu = got;  // q, k, v, g (HV * K = HV * V), beta
    auto bind = [&](SyntheticInputParams& x, uint8_t* buf, const int64_t* r, const int32_t* s, const int32_t* nr) {
      x.round = r;
      x.slots = s;
      x.n_real = nr;
      x.q = buf;
      x.k = buf + qk;
      x.v = buf + 2 * qk;
      x.g = buf + 2 * qk + vv;
      x.beta = buf + 2 * qk + 2 * vv;
    };
    {
      Placement at(runner().memory());
      SyntheticInputParams pr = p;
      bind(pr, at.out(got), at.in(round), at.in(slots), at.in(n_real));
      run_op<SyntheticInputsOp>(pr);
      at.fetch();
    }
    for (size_t e = 0; e < got.size(); e += es)  // 0xff bytes are NaN, which no input is
      ASSERT_FALSE(std::all_of(got.begin() + ptrdiff_t(e), got.begin() + ptrdiff_t(e + es),
                               [](uint8_t b) { return b == 0xff; }))
          << "element at byte " << e << " not written";
    if (cpu_runner()) continue;
    SyntheticInputParams pc = p;
    bind(pc, cpu.data(), round.data(), slots.data(), n_real.data());
    synthetic_inputs_cpu(pc);
    EXPECT_EQ(first_difference(got, cpu), -1) << "against the CPU";
  }
}

// One block: every row reads the round, then thread 0 advances it after the barrier. Real rows accept 1
// to T tokens, padded ones 0.
TEST(Synthetic, SamplerAcceptsOneToTAndAdvancesTheRound) {
  KDA_SKIP_WITHOUT_RUNNER();
  std::vector<int32_t> slots(300);
  for (int32_t n = 0; n < 300; ++n) slots[size_t(n)] = (n * 7) % 311;
  const std::vector<int32_t> n_real{290};
  std::vector<int64_t> round{11}, cpu_round{11};
  std::vector<int32_t> got(300, -5), cpu(300, -5);
  SyntheticSamplerParams p;
  p.seed = fresh_seed();
  p.rows = 300;
  p.tokens = 6;
  p.accept_rate = 0.7f;
  {
    Placement at(runner().memory());
    SyntheticSamplerParams pr = p;
    pr.slots = at.in(slots);
    pr.n_real = at.in(n_real);
    pr.round = at.out(round);
    pr.accepted = at.out(got);
    run_op<SyntheticSamplerOp>(pr);
    at.fetch();
  }
  EXPECT_EQ(round[0], 12);
  for (int32_t n = 0; n < 300; ++n) {
    if (n < n_real[0]) {
      EXPECT_TRUE(got[size_t(n)] >= 1 && got[size_t(n)] <= 6) << "row " << n << ": " << got[size_t(n)];
    } else {
      EXPECT_EQ(got[size_t(n)], 0) << "padded row " << n;
    }
  }
  EXPECT_GT(std::count(got.begin(), got.end(), 6), 0) << "no row accepted every token at rate 0.7";
  if (cpu_runner()) return;
  SyntheticSamplerParams pc = p;
  pc.slots = slots.data();
  pc.n_real = n_real.data();
  pc.round = cpu_round.data();
  pc.accepted = cpu.data();
  synthetic_sampler_cpu(pc);
  EXPECT_EQ(first_difference(got, cpu), -1) << "against the CPU";
}

// The joining state of a request: element i of layer l is the hash's value for (request, l, i), stored
// in the state dtype.
TEST(Synthetic, JoiningStateIsTheHashsValues) {
  KDA_SKIP_WITHOUT_RUNNER();
  if (runner().matrix == Matrix::thread_lanes)
    GTEST_SKIP() << "OS-thread lanes: the kernel's fixed grid is 1024 blocks of 256 threads";
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(to_string(dtype));
    SyntheticStateParams p;
    p.seed = fresh_seed();
    p.request = 17;
    p.layers = 3;
    p.slot_elems = 2 * 64 * 64;
    p.state_dtype = dtype;
    std::vector<uint8_t> got(size_t(p.layers * p.slot_elems) * dtype_size(dtype), 0xff);
    {
      Placement at(runner().memory());
      SyntheticStateParams pr = p;
      pr.out = at.out(got);
      run_op<SyntheticStateOp>(pr);
      at.fetch();
    }
    std::vector<uint8_t> want(got.size());
    for (int64_t i = 0; i < p.layers * p.slot_elems; ++i)
      math::store_from_f32(want.data(), dtype, i,
                     synthetic_state(p.seed, p.request, uint32_t(i / p.slot_elems), uint32_t(i % p.slot_elems)));
    EXPECT_EQ(first_difference(got, want), -1);
  }
}

}  // namespace
}  // namespace kdagraph::test
