// SPEC §9 on the CUDA backend (skipped without a GPU): the device conv and its window moves on the
// cases of conv_test.cpp (tests/common/conv_case.h), against fp64 and against the CPU, over many rounds;
// and the launchers' refusals of parameters the kernels are not built for, which need no device.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/conv.h"
#include "kernels/stream.h"
#include "tests/common/conv_case.h"
#include "tests/common/gpu.h"

namespace kdagraph::test {
namespace {

// Device copies of a ConvCase's buffers; run() uploads the case, launches and copies the results back.
struct DeviceConv {
  DeviceBuffer x, y0, y1, y2, state, scratch, weight, bias, row_slot, row_accept, row_parity, write_row, slot_parity;
  explicit DeviceConv(const ConvCase& c)
      : x(c.x.bytes),
        y0(c.y[0].bytes),
        y1(c.y.size() > 1 ? c.y[1].bytes : std::vector<uint8_t>(16)),
        y2(c.y.size() > 2 ? c.y[2].bytes : std::vector<uint8_t>(16)),
        state(c.state.bytes),
        scratch(c.scratch.bytes),
        weight(c.weight),
        bias(c.bias.empty() ? std::vector<float>(1) : c.bias),
        row_slot(c.row_slot),
        row_accept(c.row_accept),
        row_parity(c.row_parity),
        write_row(c.write_row),
        slot_parity(c.slot_parity) {}
  ConvPointers pointers() const {
    return ConvPointers{x.data(), {y0.data(), y1.data(), y2.data()}, state.data(), scratch.data(),
                        weight.as<float>(), bias.as<float>(), row_slot.as<int32_t>(), row_accept.as<int32_t>(),
                        row_parity.as<int32_t>(), write_row.as<int32_t>(), slot_parity.as<int32_t>()};
  }
  void download(ConvCase& c) const {
    c.y[0].bytes = y0.download<uint8_t>();
    if (c.y.size() > 1) c.y[1].bytes = y1.download<uint8_t>();
    if (c.y.size() > 2) c.y[2].bytes = y2.download<uint8_t>();
    c.state.bytes = state.download<uint8_t>();
    c.scratch.bytes = scratch.download<uint8_t>();
  }
};

const ConvBackend kCudaConv{
    [](ConvCase& c) {
      const DeviceConv d(c);
      const auto stream = test_stream();
      KDA_TEST_CUDA(launch_conv(c.params(d.pointers()), stream.get().stream));
      stream.synchronize();
      d.download(c);
    },
    [](ConvCase& c, const std::vector<int32_t>& slot_of, const std::vector<int32_t>& accept_of,
       const std::vector<int32_t>& accept_len, bool from_scratch) {
      const DeviceConv d(c);
      const DeviceBuffer slots(slot_of), accepts(accept_of.empty() ? std::vector<int32_t>(1) : accept_of),
          lengths(accept_len);
      const auto stream = test_stream();
      KDA_TEST_CUDA(launch_conv_window(
          c.window_params(d.pointers(), slots.as<int32_t>(), int32_t(slot_of.size()),
                          from_scratch ? accepts.as<int32_t>() : nullptr, lengths.as<int32_t>(), from_scratch),
          stream.get().stream));
      stream.synchronize();
      d.download(c);
    }};

class ConvCudaReferenceSweep : public ::testing::TestWithParam<ConvCaseShape> {};

// The CPU test's cases on the device: fp64 within the kernels' tolerance, the conv state and scratch
// bitwise as expected, and the outputs within the same tolerance of the CPU's.
TEST_P(ConvCudaReferenceSweep, MatchesFp64AndTheCpu) {
  KDA_SKIP_WITHOUT_GPU();
  const ConvCaseShape sh = GetParam();
  for (int32_t a = 0; a <= sh.tokens; ++a) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(sh.str() + " a=" + std::to_string(a) + " seed=" + std::to_string(seed));
    const std::vector<int32_t> slots = {3, -1, 0, 4}, accepts = {a, 0, sh.tokens, (a + 1) % (sh.tokens + 1)};
    const std::vector<int32_t> parities = {a % 2, 0, 1, 0};
    ConvCase gpu(sh, seed, slots, accepts, parities);
    ConvCase cpu(sh, seed, slots, accepts, parities);
    const ConvExpectation want = expect_of(gpu);
    kCudaConv.conv(gpu);
    expect_conv_results(gpu, want, conv_tolerance(sh.io));
    conv_cpu(cpu.params(cpu.host_pointers()));
    EXPECT_TRUE(cpu.state.bytes == gpu.state.bytes && cpu.scratch.bytes == gpu.scratch.bytes)
        << "the conv state and scratch hold copies of inputs: equal bitwise";
    std::vector<double> on_gpu, on_cpu;
    for (int32_t n = 0; n < sh.rows; ++n)
      for (int32_t t = 0; t < sh.tokens; ++t)
        for (int32_t ch = 0; ch < sh.channels; ++ch) {
          on_gpu.push_back(gpu.y_at(n, t, ch));
          on_cpu.push_back(cpu.y_at(n, t, ch));
        }
    EXPECT_LE(rel_error(on_gpu, on_cpu), conv_tolerance(sh.io));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvCudaReferenceSweep, ::testing::ValuesIn(conv_sweep_shapes()),
                         [](const auto& param_info) { return param_info.param.name(); });

TEST(ConvCuda, RoundsFollowEachSlotsAcceptedInputs) {
  KDA_SKIP_WITHOUT_GPU();
  for (const ConvCaseShape& shape : conv_sweep_shapes()) {
    if (shape.channels != 200 || shape.tokens != 4) continue;
    ConvCaseShape sh = shape;
    sh.rows = 5;
    sh.slots = 6;
    expect_rounds_follow_history(sh, fresh_seed(), 30, kCudaConv);
  }
}

// What only the device sees is clamped and recorded in a host-mapped error word, as on the CPU.
TEST(ConvCuda, BadRowsAreClampedOrPaddedAndRecorded) {
  KDA_SKIP_WITHOUT_GPU();
  ConvCaseShape sh;
  sh.channels = 300;
  sh.tokens = 2;
  sh.scratch_steps = 3;
  sh.slots = 4;
  sh.rows = 2;
  const uint64_t seed = fresh_seed();
  ConvCase c(sh, seed, {7, 1}, {0, 9});
  ConvCase clamped(sh, seed, {-1, 1}, {0, 3});
  const ConvExpectation want = expect_of(clamped);
  const DeviceConv d(c);
  detail::MappedHostBuffer errors(Backend::cuda, sizeof(DeviceErrorWord));
  *static_cast<DeviceErrorWord*>(errors.host()) = DeviceErrorWord{};
  ConvParams p = c.params(d.pointers());
  p.errors = static_cast<DeviceErrorWord*>(errors.device());
  const auto stream = test_stream();
  KDA_TEST_CUDA(launch_conv(p, stream.get().stream));
  stream.synchronize();
  d.download(c);
  expect_conv_results(c, want, conv_tolerance(sh.io));
  EXPECT_EQ(read_device_errors(static_cast<const DeviceErrorWord*>(errors.host())).count, 2u);
}

// The launchers refuse, naming the check and its value, what the kernels are not built for. These run
// on the host before any launch and need no device.
TEST(ConvCudaLaunch, RefusesParametersTheKernelsAreNotBuiltFor) {
  ConvCaseShape sh;
  ConvCase c(sh, 1, {0, 1, 2, 3}, {0, 0, 0, 0});
  const ConvParams good = c.params(c.host_pointers());
  const std::vector<std::pair<std::string, std::function<void(ConvParams&)>>> bad = {
      {"width", [](ConvParams& p) { p.width = 5; }},
      {"width", [](ConvParams& p) { p.width = 1; }},
      {"tokens", [](ConvParams& p) { p.tokens = p.scratch_steps + 1; }},
      {"channels", [](ConvParams& p) { p.channels = 0; }},
      {"out", [](ConvParams& p) { p.out[0].channels -= 1; }},
      {"out[].y", [](ConvParams& p) { p.out[0].y = nullptr; }},
      {"x", [](ConvParams& p) { p.x = static_cast<const char*>(p.x) + 1; }},
      {"weight", [](ConvParams& p) { p.weight = nullptr; }},
      {"state", [](ConvParams& p) { p.state.row_stride = 4; }},
      {"state", [](ConvParams& p) { p.state.dtype = DType::bf16; }},
      {"row_accept", [](ConvParams& p) { p.row_accept = nullptr; }},
      {"row_parity", [](ConvParams& p) { p.row_parity = nullptr; }},
  };
  for (const auto& [argument, spoil] : bad) {
    ConvParams p = good;
    spoil(p);
    try {
      (void)launch_conv(p, nullptr);
      ADD_FAILURE() << "a bad " << argument << " was launched";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
      EXPECT_NE(std::string(e.what()).find("launch_conv"), std::string::npos) << e.what();
    }
  }
  ConvWindowParams w = c.window_params(c.host_pointers(), c.row_slot.data(), 4, nullptr, c.row_accept.data(), false);
  w.width = 9;
  try {
    (void)launch_conv_window(w, nullptr);
    ADD_FAILURE() << "a bad width was launched";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "width") << e.what();
  }
}

}  // namespace
}  // namespace kdagraph::test
