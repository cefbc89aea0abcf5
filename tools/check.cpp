#include "tools/check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/kda_math.h"

namespace kdagraph::cli {

namespace {

const Stream kCpu{Backend::cpu, nullptr};

HostEngineConfig reference_config(HostEngineConfig c) {
  c.verifier.backend = Backend::cpu;
  c.verifier.mode = Mode::two_phase;
  c.verifier.fuse_conv = false;  // the conv and the verify as the separate operations
  c.runner.exec = Exec::eager;
  c.keep_outputs = true;
  return c;
}

float element(const std::vector<uint8_t>& bytes, DType t, size_t i) {
  return math::load_as_f32(bytes.data(), t, int64_t(i));
}

double rel_error(const std::vector<uint8_t>& got, const std::vector<uint8_t>& ref, DType t) {
  const size_t n = ref.size() / dtype_size(t);
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double r = element(ref, t, i), d = double(element(got, t, i)) - r;
    num += d * d;
    den += r * r;
  }
  if (!std::isfinite(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// First element whose bits differ; both the same size.
size_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, DType t) {
  const size_t es = dtype_size(t);
  for (size_t i = 0; i < a.size(); i += es)
    if (std::memcmp(a.data() + i, b.data() + i, es) != 0) return i / es;
  return a.size() / es;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string slot_list(const std::vector<int32_t>& slots) {
  std::string out;
  for (size_t i = 0; i < slots.size(); ++i) out += (i ? "," : "") + std::to_string(slots[i]);
  return out;
}

}  // namespace

ReferenceCheck::ReferenceCheck(const HostEngineConfig& run) : ref_(reference_config(run)) {
  const VerifierConfig& v = run.verifier;
  // docs/low_precision.md: with a low-precision state, replay rounds at its flushes only and the two-phase reference
  // at every stored post-state; every other pairing rounds alike, bitwise on the CPU.
  const bool rounds_alike = v.pool.state_dtype == DType::f32 || !mode_policy(v.mode).ring;
  result_.bitwise = v.backend == Backend::cpu && rounds_alike;
  result_.tolerance = v.io_dtype != DType::f32 || v.pool.state_dtype != DType::f32 ? 1e-2 : 1e-5;
  ref_.start(kCpu);
}

std::string ReferenceCheck::comparison() const {
  return result_.bitwise ? "bitwise" : "relative error <= " + number(result_.tolerance);
}

void ReferenceCheck::compare_round(const HostEngine& run) {
  ref_.run_round(kCpu);
  const size_t r = size_t(run.rounds_run()) - 1;
  const RoundRecord& got = run.rounds().at(r);
  const RoundRecord& want = ref_.rounds().at(r);
  const std::string where = "round " + std::to_string(r);
  if (got.slots != want.slots)
    throw CheckFailure(where + ": the batch (slots " + slot_list(got.slots) + ") differs from the reference's (slots " +
                       slot_list(want.slots) + ")");
  compare_retired(run);  // requests that retired before this round
  const VerifierConfig& c = ref_.config().verifier;
  const DType io = c.io_dtype;
  if (result_.bitwise) {
    if (got.outputs != want.outputs) {
      const size_t n = got.slots.size(), T = size_t(c.tokens), HV = size_t(c.model.value_heads),
                   V = size_t(c.model.head_v);
      const size_t i = first_difference(got.outputs, want.outputs, io);
      const size_t layer = i / (n * T * HV * V), row = i / (T * HV * V) % n, token = i / (HV * V) % T,
                   head = i / V % HV, e = i % V;
      throw CheckFailure(where + ": outputs differ from the CPU two-phase eager reference, first at layer " +
                         std::to_string(layer) + ", row " + std::to_string(row) + " (slot " +
                         std::to_string(got.slots[row]) + "), token " + std::to_string(token) + ", value head " +
                         std::to_string(head) + ", element " + std::to_string(e) + ": " +
                         number(element(got.outputs, io, i)) + " vs " + number(element(want.outputs, io, i)));
    }
  } else {
    const double err = rel_error(got.outputs, want.outputs, io);
    result_.max_rel_error = std::max(result_.max_rel_error, err);
    if (!(err <= result_.tolerance))
      throw CheckFailure(where + ": outputs differ from the CPU two-phase eager reference: ||run - ref|| / ||ref|| = " +
                         number(err) + " > " + number(result_.tolerance));
  }
  ++result_.rounds_compared;
}

void ReferenceCheck::compare_finish(const HostEngine& run) {
  ref_.finish(kCpu);
  compare_retired(run);
  if (run.retired().size() != ref_.retired().size())
    throw CheckFailure("the run retired " + std::to_string(run.retired().size()) + " requests, the reference " +
                       std::to_string(ref_.retired().size()));
}

void ReferenceCheck::compare_retired(const HostEngine& run) {
  const std::vector<RetiredRequest>& got = run.retired();
  const std::vector<RetiredRequest>& want = ref_.retired();
  const VerifierConfig& c = ref_.config().verifier;
  const DType st = c.pool.state_dtype;
  for (size_t i = size_t(result_.requests_compared); i < got.size() && i < want.size(); ++i) {
    const RetiredRequest& a = got[i];
    const RetiredRequest& b = want[i];
    const std::string where = "request " + std::to_string(a.request) + " (slot " + std::to_string(a.slot) +
                              ", retired after " + std::to_string(a.rounds) + " rounds)";
    if (a.request != b.request || a.slot != b.slot)
      throw CheckFailure("retirement " + std::to_string(i) + ": the run retired request " + std::to_string(a.request) +
                         " (slot " + std::to_string(a.slot) + "), the reference request " + std::to_string(b.request) +
                         " (slot " + std::to_string(b.slot) + ")");
    if (result_.bitwise) {
      if (a.state != b.state) {
        const size_t HV = size_t(c.model.value_heads), V = size_t(c.model.head_v), K = size_t(c.model.head_k);
        const size_t e = first_difference(a.state, b.state, st);
        throw CheckFailure(where + ": materialized state differs from the CPU two-phase eager reference, first at layer " +
                           std::to_string(e / (HV * V * K)) + ", value head " + std::to_string(e / (V * K) % HV) +
                           ", S[" + std::to_string(e / K % V) + "][" + std::to_string(e % K) + "]: " +
                           number(element(a.state, st, e)) + " vs " + number(element(b.state, st, e)));
      }
    } else {
      const double err = rel_error(a.state, b.state, st);
      result_.max_rel_error = std::max(result_.max_rel_error, err);
      if (!(err <= result_.tolerance))
        throw CheckFailure(where + ": materialized state differs from the CPU two-phase eager reference: "
                           "||run - ref|| / ||ref|| = " + number(err) + " > " + number(result_.tolerance));
    }
    // The conv window holds copies of hashed inputs, the same bits on every backend: always bitwise.
    if (a.conv_window != b.conv_window) {
      const DType io = c.io_dtype;
      const size_t C = size_t(c.conv.channels), W = size_t(c.conv.width);
      const size_t e = first_difference(a.conv_window, b.conv_window, io);
      throw CheckFailure(where + ": materialized conv window differs from the CPU two-phase eager reference, first at layer " +
                         std::to_string(e / ((W - 1) * C)) + ", column " + std::to_string(e / C % (W - 1)) +
                         ", channel " + std::to_string(e % C) + ": " + number(element(a.conv_window, io, e)) + " vs " +
                         number(element(b.conv_window, io, e)));
    }
    ++result_.requests_compared;
  }
}

}  // namespace kdagraph::cli
