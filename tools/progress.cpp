#include "tools/progress.h"

#include <unistd.h>

#include <cstdio>

namespace kdagraph::cli {

namespace {
constexpr double kQuietSeconds = 3.0;
}

Progress::Progress(int64_t total, std::string what)
    : total_(total), what_(std::move(what)), start_(Clock::now()), last_(start_), tty_(isatty(2) != 0) {}

Progress::~Progress() { finish(); }

void Progress::update(int64_t done) {
  const Clock::time_point now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double interval = tty_ ? 1.0 : 10.0;  // a log file gets fewer lines
  if (elapsed < kQuietSeconds || std::chrono::duration<double>(now - last_).count() < interval) return;
  last_ = now;
  const double eta = done > 0 ? elapsed * double(total_ - done) / double(done) : 0.0;
  std::fprintf(stderr, "%skdagraph: %s %lld/%lld, %.0f s elapsed, about %.0f s left%s", tty_ ? "\r" : "",
               what_.c_str(), static_cast<long long>(done), static_cast<long long>(total_), elapsed, eta,
               tty_ ? "   " : "\n");
  std::fflush(stderr);
  printed_ = true;
}

void Progress::finish() {
  if (printed_ && tty_) std::fputc('\n', stderr);
  printed_ = false;
}

}  // namespace kdagraph::cli
