// A progress line on stderr for commands that run longer than a few seconds; quiet before that.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace kdagraph::cli {

class Progress {
 public:
  // `what` names the unit counted ("round", "point").
  Progress(int64_t total, std::string what);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `done` units finished; prints at most once a second, and only after the first few seconds.
  void update(int64_t done);
  // Ends the line if one was printed.
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_;
  std::string what_;
  Clock::time_point start_, last_;
  bool printed_ = false;
  bool tty_ = false;
};

}  // namespace kdagraph::cli
