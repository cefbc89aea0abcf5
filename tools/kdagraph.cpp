// The `kdagraph` command line: `run` (the host engine of docs/cli.md), `bench` (the sweeps) and `drift`
// (docs/low_precision.md). Every refusal is a message and an exit status, never a stack trace: 2 for a bad command
// line, 1 for an error at run time, 3 for a failed --check.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "kdagraph/error.hpp"
#include "tools/cli_args.h"
#include "tools/commands.h"

namespace {

constexpr const char* kUsage =
    "usage: kdagraph <command> [options]\n"
    "\n"
    "commands:\n"
    "  run     decode rounds with the host engine and print a summary (--check compares with the CPU reference)\n"
    "  bench   time rounds over modes, executions, batch sizes and draft lengths; CSV and markdown\n"
    "  drift   how far fp32, bf16 and f16 states drift from fp64 over many rounds, each mode and rounding\n"
    "\n"
    "kdagraph <command> --help lists a command's options.\n";

// The option behind a configuration field the library refused, when there is one.
std::string option_for(const std::string& argument) {
  static const std::pair<const char*, const char*> kOptions[] = {
      {"model.layers", "--layers"},         {"model.heads", "--heads"},     {"model.value_heads", "--value-heads"},
      {"model.head_k", "--head-dim"},       {"model.head_v", "--head-dim"}, {"tokens", "--draft"},
      {"pool.scratch_steps", "--draft"},    {"pool.slots", "--slots"},      {"max_rows", "--batch"},
      {"batch", "--batch"},                 {"io_dtype", "--dtype"},        {"pool.state_dtype", "--state-dtype"},
      {"accept_rate", "--accept-rate"},     {"retire_rate", "--retire-rate"}, {"backend", "--backend"},
      {"ring.records", "--ring"},           {"ring.flush_min", "--flush-min"}};
  for (const auto& [field, option] : kOptions)
    if (argument == field) return std::string(option) + ": ";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  const bool known = command == "run" || command == "bench" || command == "drift";
  const std::string program = known ? "kdagraph " + command : "kdagraph";
  try {
    if (command == "run") return kdagraph::cli::run_command(argc, argv);
    if (command == "bench") return kdagraph::cli::bench_command(argc, argv);
    if (command == "drift") return kdagraph::cli::drift_command(argc, argv);
    if (command == "--help" || command == "-h" || command == "help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (command.empty()) throw kdagraph::cli::UsageError("a command is needed: run, bench or drift");
    throw kdagraph::cli::UsageError("unknown command '" + command + "' (allowed: run, bench, drift)");
  } catch (const kdagraph::cli::UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), e.what());
    std::fprintf(stderr, "(%s --help lists the %s)\n", program.c_str(), known ? "options" : "commands");
    return 2;
  } catch (const kdagraph::InvalidArgument& e) {
    // The library refused a configuration the options produced (e.g. a head size the GPU lacks).
    std::fprintf(stderr, "%s: %s%s\n", program.c_str(), option_for(e.argument()).c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
    return 1;
  }
}
