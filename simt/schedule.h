// The SIMT executor's schedules (Schedule in simt/executor.h): which fiber of a block runs next,
// and in which order the blocks of a grid run.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "simt/executor.h"

namespace kdagraph::simt::detail {

// The runnable fibers of a block, and the pick of the next one.
class ReadySet {
 public:
  void reset(int lanes);
  void set(int i) { words_[size_t(i / 64)] |= uint64_t(1) << (i % 64); }
  void clear(int i) { words_[size_t(i / 64)] &= ~(uint64_t(1) << (i % 64)); }
  // -1 when no lane can run. `last` is the lane that ran last (round robin goes on after it).
  int pick(Schedule s, int last, std::mt19937_64& rng) const;

 private:
  int next_from(int first) const;
  std::vector<uint64_t> words_;
};

// Linear block indices in the order the schedule asks for.
std::vector<uint64_t> block_order(uint64_t blocks, Schedule s, std::mt19937_64& rng);

}  // namespace kdagraph::simt::detail
