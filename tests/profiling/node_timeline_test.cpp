// The idle-time arithmetic behind `kdagraph bench --node-trace` (profiling/node_timeline.h): hand-worked
// timelines, then random ones against a nanosecond-by-nanosecond count.
#include "profiling/node_timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace kdagraph::profiling {
namespace {

TEST(NodeTimeline, EmptyLaunchIsAllZero) {
  const LaunchTimeline t = summarize_launch({});
  EXPECT_EQ(t.nodes, 0);
  EXPECT_EQ(t.span_us, 0.0);
  EXPECT_EQ(t.idle_fraction(), 0.0);
}

TEST(NodeTimeline, BackToBackNodesNeverIdle) {
  const LaunchTimeline t = summarize_launch({{5000, 7000}, {2000, 5000}, {7000, 7500}});
  EXPECT_EQ(t.nodes, 3);
  EXPECT_DOUBLE_EQ(t.span_us, 5.5);
  EXPECT_DOUBLE_EQ(t.busy_us, 5.5);
  EXPECT_EQ(t.largest_gap_us, 0.0);
  EXPECT_EQ(t.idle_fraction(), 0.0);
}

TEST(NodeTimeline, GapsBetweenNodesAreIdle) {
  // Busy 0-10, 15-20, 30-40 us: 25 of 40 us, the longest gap 10 us.
  const LaunchTimeline t = summarize_launch({{30000, 40000}, {0, 10000}, {15000, 20000}});
  EXPECT_DOUBLE_EQ(t.span_us, 40.0);
  EXPECT_DOUBLE_EQ(t.busy_us, 25.0);
  EXPECT_DOUBLE_EQ(t.largest_gap_us, 10.0);
  EXPECT_DOUBLE_EQ(t.idle_fraction(), 15.0 / 40.0);
}

TEST(NodeTimeline, OverlappingAndNestedNodesCountOnce) {
  // Union: 0-150 and 200-210 ns; [50, 80] lies inside [0, 100], which [90, 150] extends.
  const LaunchTimeline t = summarize_launch({{90, 150}, {0, 100}, {200, 210}, {50, 80}});
  EXPECT_DOUBLE_EQ(t.span_us, 0.210);
  EXPECT_DOUBLE_EQ(t.busy_us, 0.160);
  EXPECT_DOUBLE_EQ(t.largest_gap_us, 0.050);
}

TEST(NodeTimeline, RandomTimelinesMatchACountOfEveryNanosecond) {
  std::mt19937 rng(20261202);
  for (int trial = 0; trial < 500; ++trial) {
    const int count = 1 + int(rng() % 12);
    std::vector<NodeInterval> nodes;
    std::vector<bool> running(400, false);
    uint64_t first = UINT64_MAX, last = 0;
    for (int i = 0; i < count; ++i) {
      const uint64_t start = rng() % 300, end = start + 1 + rng() % 100;  // nodes take time
      nodes.push_back({start, end});
      for (uint64_t ns = start; ns < end; ++ns) running[ns] = true;
      first = std::min(first, start);
      last = std::max(last, end);
    }
    uint64_t busy = 0, gap = 0, longest_gap = 0;
    for (uint64_t ns = first; ns < last; ++ns) {
      busy += running[ns];
      gap = running[ns] ? 0 : gap + 1;
      longest_gap = std::max(longest_gap, gap);
    }
    const LaunchTimeline t = summarize_launch(nodes);
    ASSERT_EQ(t.nodes, count) << "trial " << trial;
    ASSERT_DOUBLE_EQ(t.span_us, double(last - first) * 1e-3) << "trial " << trial;
    ASSERT_DOUBLE_EQ(t.busy_us, double(busy) * 1e-3) << "trial " << trial;
    ASSERT_DOUBLE_EQ(t.largest_gap_us, double(longest_gap) * 1e-3) << "trial " << trial;
  }
}

TEST(NodeTimeline, RunsOfEachNodeSplitIntoLaunchesInOrder) {
  // Graph 7 (nodes 1, 2, 3) launched at 0, 100 and 200 us; graph 9 (node 5) at 50 and 150 us, between
  // them. Launch i of graph 7: node 1 at +0..(10 + i) us, node 2 at +12..20, node 3 at +20..30. Launch i
  // of graph 9: node 5 for 4 + i us.
  std::vector<NodeRecord> records;
  for (uint64_t launch = 0; launch < 3; ++launch) {
    const uint64_t t = launch * 100000;
    records.push_back({7, 1, {t, t + 10000 + launch * 1000}});
    records.push_back({7, 2, {t + 12000, t + 20000}});
    records.push_back({7, 3, {t + 20000, t + 30000}});
  }
  for (uint64_t launch = 0; launch < 2; ++launch) {
    const uint64_t t = 50000 + launch * 100000;
    records.push_back({9, 5, {t, t + 4000 + launch * 1000}});
  }
  std::shuffle(records.begin(), records.end(), std::mt19937(7));
  const std::vector<LaunchTimeline> launches = split_launches(records);
  ASSERT_EQ(launches.size(), 5u);
  // Graph 7 first (it ran first), its launches in order: node 1 ends at 10, 11, 12 us, so the gap before
  // node 2 (at 12 us) is 2, 1, 0 us.
  const double busy[3] = {28.0, 29.0, 30.0}, gap[3] = {2.0, 1.0, 0.0};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(launches[i].nodes, 3) << "launch " << i;
    EXPECT_DOUBLE_EQ(launches[i].span_us, 30.0) << "launch " << i;
    EXPECT_DOUBLE_EQ(launches[i].busy_us, busy[i]) << "launch " << i;
    EXPECT_DOUBLE_EQ(launches[i].largest_gap_us, gap[i]) << "launch " << i;
  }
  EXPECT_EQ(launches[3].nodes, 1);
  EXPECT_DOUBLE_EQ(launches[3].span_us, 4.0);
  EXPECT_EQ(launches[4].nodes, 1);
  EXPECT_DOUBLE_EQ(launches[4].span_us, 5.0);
  EXPECT_TRUE(split_launches({}).empty());
}

TEST(NodeTimeline, MedianOfOddAndEvenCounts) {
  EXPECT_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_THROW(median({}), std::invalid_argument);
}

}  // namespace
}  // namespace kdagraph::profiling
