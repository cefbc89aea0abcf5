// docs/errors.md: every bad input is a clear error that names the argument and its value, and changes nothing.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kdagraph/verifier.hpp"
#include "tests/common/engines.h"
#include "tests/common/storage.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

const Stream kCpu{Backend::cpu, nullptr};

// Expects `fn` to throw InvalidArgument naming `argument`, with `value` in its message.
void expect_rejected(const std::function<void()>& fn, const std::string& argument, const std::string& value) {
  try {
    fn();
    ADD_FAILURE() << "no error for bad " << argument;
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(argument), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(value), std::string::npos) << "value " << value << " missing: " << e.what();
  }
}

TEST(Validate, BadShapesAreRejectedByName) {
  auto with = [](const std::function<void(VerifierConfig&)>& change) {
    VerifierConfig c = small_verifier(Backend::cpu, Mode::fused_accept);
    change(c);
    return [c] { Verifier v(c); };
  };
  expect_rejected(with([](VerifierConfig& c) { c.model.value_heads = 3; }), "model.value_heads", "3");
  expect_rejected(with([](VerifierConfig& c) { c.tokens = 0; }), "tokens", "0");
  expect_rejected(with([](VerifierConfig& c) { c.tokens = 9; }), "tokens", "9");  // T > S = 5
  expect_rejected(with([](VerifierConfig& c) { c.model.heads = 0; }), "model.heads", "0");
  expect_rejected(with([](VerifierConfig& c) { c.model.head_k = 0; }), "model.head_k", "0");
  expect_rejected(with([](VerifierConfig& c) { c.model.layers = 0; }), "model.layers", "0");
  expect_rejected(with([](VerifierConfig& c) { c.pool.slots = 0; }), "pool.slots", "0");
  expect_rejected(with([](VerifierConfig& c) { c.max_rows = 13; }), "max_rows", "13");  // > P
  expect_rejected(with([](VerifierConfig& c) {
                    c.options.gate = GateMode::lower_bound;
                    c.options.gate_lower_bound = 1.0f;
                  }),
                  "options.gate_lower_bound", "1.0");
}

// docs/modes.md: replay's ring holds a round's T records beside up to R - T pending ones, so R >= 2 T, and a
// flush_min above R - T could never be reached; other modes have no ring to check.
TEST(Validate, ABadReplayRingIsRejectedByName) {
  auto with = [](Mode mode, ReplayRing ring) {
    VerifierConfig c = small_verifier(Backend::cpu, mode);  // T = 4
    c.ring = ring;
    return [c] { Verifier v(c); };
  };
  expect_rejected(with(Mode::replay, ReplayRing{7, -1}), "ring.records", "7");
  expect_rejected(with(Mode::replay, ReplayRing{-8, -1}), "ring.records", "-8");
  expect_rejected(with(Mode::replay, ReplayRing{12, 9}), "ring.flush_min", "9");
  expect_rejected(with(Mode::replay, ReplayRing{8, 5}), "ring.flush_min", "5");  // R - T = 4
  expect_rejected(with(Mode::replay, ReplayRing{12, -2}), "ring.flush_min", "-2");
  for (ReplayRing ok : {ReplayRing{8, 0}, ReplayRing{8, 4}, ReplayRing{0, -1}, ReplayRing{12, 8}}) {
    EXPECT_NO_THROW(with(Mode::replay, ok)()) << ok.records << " " << ok.flush_min;
  }
  EXPECT_NO_THROW(with(Mode::fused_accept, ReplayRing{3, 9})()) << "only replay has a ring";
  EXPECT_EQ(resolved_ring(ReplayRing{}, 4).records, 12);
  EXPECT_EQ(resolved_ring(ReplayRing{}, 4).flush_min, 5);
  EXPECT_EQ(resolved_ring(ReplayRing{8, -1}, 4).flush_min, 4) << "T + 1 where R - T allows it";
}

#if !defined(KDAGRAPH_WITH_CUDA)
TEST(Validate, CudaBackendWithoutCudaIsAnError) {
  VerifierConfig c = small_verifier(Backend::cuda, Mode::fused_accept);
  expect_rejected([c] { Verifier v(c); }, "backend", "cuda");
}
#endif

class ValidateCalls : public ::testing::Test {
 protected:
  ValidateCalls() : v(small_verifier(Backend::cpu, Mode::fused_accept)) {
    randomize_storage(v, fresh_seed());
    std::vector<int32_t> accept_len = {0, 2, 4, 1, 0, 3, 0, 0, 1, 2, 0, 4};
    detail::copy_to_backend(Backend::cpu, v.accept_len(), accept_len.data(), accept_len.size() * 4);
    const std::vector<int32_t> slots = {4, 1};
    v.set_batch(kCpu, slots.data(), 2);
    before = snapshot(v);
  }
  // A rejected call changes no state.
  void TearDown() override { EXPECT_TRUE(snapshot(v) == before) << "a rejected call changed the storage"; }

  Verifier v;
  StorageSnapshot before;
};

TEST_F(ValidateCalls, BatchSizeZeroOrAboveCapacity) {
  const std::vector<int32_t> slots(9, 0);
  expect_rejected([&] { v.set_batch(kCpu, slots.data(), 0); }, "n", "0");
  expect_rejected([&] { v.set_batch(kCpu, slots.data(), 9); }, "n", "9");
  EXPECT_EQ(v.batch_size(), 2);
}

TEST_F(ValidateCalls, SlotOutOfRangeOrRepeated) {
  const std::vector<int32_t> out_of_range = {1, 12}, negative = {-1}, repeated = {3, 5, 3};
  expect_rejected([&] { v.set_batch(kCpu, out_of_range.data(), 2); }, "slots[1]", "12");
  expect_rejected([&] { v.set_batch(kCpu, negative.data(), 1); }, "slots[0]", "-1");
  expect_rejected([&] { v.set_batch(kCpu, repeated.data(), 3); }, "slots", "3");
  expect_rejected([&] { v.set_batch(kCpu, nullptr, 1); }, "slots", "null");
  expect_rejected([&] { v.enqueue_materialize(kCpu, repeated.data(), 3); }, "slots", "3");
  expect_rejected([&] { v.enqueue_materialize(kCpu, out_of_range.data(), 2); }, "slots[1]", "12");
  expect_rejected([&] { v.prefill(kCpu, 12, before.pool.data()); }, "slot", "12");
}

TEST_F(ValidateCalls, AcceptLengthOutsideOneToT) {
  const std::vector<int32_t> zero = {0, 1}, too_long = {2, 5};
  expect_rejected([&] { v.enqueue_accept_from_host(kCpu, zero.data(), 2); }, "accepted[0]", "0");
  expect_rejected([&] { v.enqueue_accept_from_host(kCpu, too_long.data(), 2); }, "accepted[1]", "5");
  expect_rejected([&] { v.enqueue_accept_from_host(kCpu, zero.data(), 1); }, "n", "1");
}

TEST_F(ValidateCalls, NullMisalignedOrMismatchedBuffers) {
  std::vector<float> buf(8 * 4 * 4 * 32 + 16, 0.5f);
  LayerInputs in;
  in.q = in.k = in.v = in.g = in.beta = buf.data();
  in.o = buf.data();
  in.A_log = in.dt_bias = buf.data();
  LayerInputs null_q = in;
  null_q.q = nullptr;
  expect_rejected([&] { v.enqueue_verify(kCpu, 0, null_q, 2); }, "q", "null");
  LayerInputs odd_v = in;
  odd_v.v = reinterpret_cast<const char*>(buf.data()) + 4;
  expect_rejected([&] { v.enqueue_verify(kCpu, 0, odd_v, 2); }, "v", "16-byte aligned");
  LayerInputs odd_gate = in;  // an absent one is zeros (docs/python.md); a misaligned one is refused
  odd_gate.A_log = reinterpret_cast<const float*>(reinterpret_cast<const char*>(buf.data()) + 2);
  expect_rejected([&] { v.enqueue_verify(kCpu, 0, odd_gate, 2); }, "A_log", "aligned");
  expect_rejected([&] { v.enqueue_verify(kCpu, 3, in, 2); }, "layer", "3");
  expect_rejected([&] { v.enqueue_verify(kCpu, 0, in, 1); }, "rows", "1");   // fewer rows than the batch
  expect_rejected([&] { v.enqueue_verify(kCpu, 0, in, 9); }, "rows", "9");   // above capacity
  expect_rejected([&] { v.enqueue_verify(Stream{Backend::cuda, nullptr}, 0, in, 2); }, "stream.backend", "cuda");
  // enqueue_round checks every layer before it enqueues anything.
  std::vector<LayerInputs> layers = {in, in, null_q};
  expect_rejected([&] { v.enqueue_round(kCpu, layers.data(), 2); }, "q", "null");
}

TEST_F(ValidateCalls, CommitIsTwoPhaseOnly) {
  expect_rejected([&] { v.enqueue_commit(kCpu, 2); }, "mode", "fused-accept");
}

}  // namespace
}  // namespace kdagraph::test
