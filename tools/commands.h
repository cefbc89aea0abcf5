// The subcommands of the `kdagraph` command line. Each returns the process exit status: 0 success,
// 1 a runtime error, 2 a bad command line (UsageError), 3 a failed --check.
#pragma once

namespace kdagraph::cli {

// argv[0] is the program, argv[1] the subcommand; options start at argv[2].
int run_command(int argc, char** argv);
int bench_command(int argc, char** argv);
int drift_command(int argc, char** argv);

}  // namespace kdagraph::cli
