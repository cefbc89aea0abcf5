// The SIMT executor's schedules: see simt/schedule.h.
#include "simt/schedule.h"

#include <algorithm>
#include <numeric>

namespace kdagraph::simt {

const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::ascending: return "ascending";
    case Schedule::descending: return "descending";
    case Schedule::round_robin: return "round_robin";
    case Schedule::random: return "random";
    case Schedule::rotate: return "rotate";
  }
  return "?";
}

namespace detail {

void ReadySet::reset(int lanes) {
  words_.assign(size_t((lanes + 63) / 64), 0);
  for (int i = 0; i < lanes; ++i) set(i);
}

int ReadySet::pick(Schedule s, int last, std::mt19937_64& rng) const {
  switch (s) {
    case Schedule::ascending: return next_from(0);
    case Schedule::descending:
      for (int w = int(words_.size()) - 1; w >= 0; --w)
        if (words_[size_t(w)]) return w * 64 + 63 - __builtin_clzll(words_[size_t(w)]);
      return -1;
    case Schedule::round_robin: {
      const int i = next_from(last + 1);
      return i >= 0 ? i : next_from(0);
    }
    case Schedule::random: {
      int count = 0;
      for (uint64_t w : words_) count += __builtin_popcountll(w);
      if (count == 0) return -1;
      int k = int(rng() % uint64_t(count));
      for (size_t w = 0; w < words_.size(); ++w) {
        uint64_t bits = words_[w];
        if (k >= __builtin_popcountll(bits)) {
          k -= __builtin_popcountll(bits);
          continue;
        }
        for (; k > 0; --k) bits &= bits - 1;  // drop the k lowest set bits
        return int(w) * 64 + __builtin_ctzll(bits);
      }
      return -1;
    }
    case Schedule::rotate: break;  // resolved to one of the four per launch, never picked from
  }
  return -1;
}

int ReadySet::next_from(int first) const {
  for (int w = first / 64; w < int(words_.size()); ++w) {
    uint64_t bits = words_[size_t(w)];
    if (w == first / 64) bits &= ~uint64_t(0) << (first % 64);
    if (bits) return w * 64 + __builtin_ctzll(bits);
  }
  return -1;
}

std::vector<uint64_t> block_order(uint64_t blocks, Schedule s, std::mt19937_64& rng) {
  std::vector<uint64_t> order(blocks);
  std::iota(order.begin(), order.end(), uint64_t(0));
  if (s == Schedule::descending) std::reverse(order.begin(), order.end());
  if (s == Schedule::random) std::shuffle(order.begin(), order.end(), rng);
  return order;
}

}  // namespace detail
}  // namespace kdagraph::simt
