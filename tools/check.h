// `kdagraph run --check` (docs/cli.md): the same rounds through a CPU two-phase eager HostEngine with the
// same seed and configuration (with a conv, as the unfused conv and verify), compared round by round: every round's outputs and every retired
// request's materialized state and conv window. Bitwise when the run is on the CPU (docs/modes.md: all modes
// and executions agree bitwise on one backend), except replay with a low-precision state (docs/low_precision.md); else
// within a relative tolerance, ||run - ref|| / ||ref|| per round or request, except the conv windows,
// copies of inputs, which are bitwise everywhere.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "harness/host_engine.h"

namespace kdagraph::cli {

// The run and the reference differ; the message names the first round or request that does.
class CheckFailure : public std::runtime_error {
 public:
  explicit CheckFailure(const std::string& message) : std::runtime_error(message) {}
};

struct CheckResult {
  bool bitwise = true;
  double tolerance = 0.0;        // when not bitwise
  int32_t rounds_compared = 0;
  int32_t requests_compared = 0;
  double max_rel_error = 0.0;    // largest per-round or per-request relative error seen
};

class ReferenceCheck {
 public:
  // Builds and starts the reference engine for a run configured with `run` (keep_outputs set).
  explicit ReferenceCheck(const HostEngineConfig& run);
  ReferenceCheck(const ReferenceCheck&) = delete;
  ReferenceCheck& operator=(const ReferenceCheck&) = delete;

  // After each run_round of the run: the reference runs the same round; both are compared, with the
  // requests that retired before it. Throws CheckFailure.
  void compare_round(const HostEngine& run);
  // After the run's finish: the reference finishes; the remaining retirements are compared.
  void compare_finish(const HostEngine& run);
  const CheckResult& result() const { return result_; }
  // "bitwise" or "relative error <= 1e-05"
  std::string comparison() const;

 private:
  void compare_retired(const HostEngine& run);
  HostEngine ref_;
  CheckResult result_;
};

}  // namespace kdagraph::cli
