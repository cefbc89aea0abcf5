// docs/graphs.md, docs/conv.md through the host engine: the same rounds with each layer's conv fused into its verify (one
// kernel per layer) and as the two launches, through the graph runner (buckets, padding, the CPU graph
// twin on the CPU backend), with requests joining and retiring. Shared by the CPU test and its SIMT twin.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include "harness/host_engine.h"

namespace kdagraph::test {

// Runs `rounds` rounds of `c` (which has a conv) fused and unfused from the same seed and expects,
// bitwise, every round's outputs and every retired request's materialized state and conv window; the
// batches must have run in more than one bucket and requests must have retired.
inline void expect_fused_engine_matches_unfused(HostEngineConfig c, const Stream& s, int rounds) {
  SCOPED_TRACE(std::string(to_string(c.verifier.mode)) + " W=" + std::to_string(c.verifier.conv.width) + " " +
               to_string(c.verifier.io_dtype) + " seed=" + std::to_string(c.seed));
  c.runner.buckets = {1, 2, 3, 4, 6, 8};
  c.vary_batch = true;
  c.keep_outputs = true;
  std::unique_ptr<HostEngine> engines[2];
  std::set<int32_t> buckets;
  for (bool fused : {false, true}) {
    c.verifier.fuse_conv = fused;
    std::unique_ptr<HostEngine>& e = engines[fused ? 1 : 0];
    e = std::make_unique<HostEngine>(c);
    e->start(s);
    for (int r = 0; r < rounds; ++r) {
      e->run_round(s);
      buckets.insert(e->runner().rows());
    }
    e->finish(s);
  }
  const HostEngine &want = *engines[0], &got = *engines[1];
  ASSERT_EQ(got.rounds().size(), want.rounds().size());
  for (size_t r = 0; r < want.rounds().size(); ++r) {
    ASSERT_EQ(got.rounds()[r].slots, want.rounds()[r].slots) << "round " << r;
    ASSERT_TRUE(got.rounds()[r].outputs == want.rounds()[r].outputs) << "fused outputs differ in round " << r;
  }
  ASSERT_EQ(got.retired().size(), want.retired().size());
  for (size_t i = 0; i < want.retired().size(); ++i) {
    EXPECT_TRUE(got.retired()[i].state == want.retired()[i].state) << "state of request " << want.retired()[i].request;
    EXPECT_TRUE(got.retired()[i].conv_window == want.retired()[i].conv_window)
        << "conv window of request " << want.retired()[i].request;
  }
  // What a long run must have covered; a short one (the sanitizers' 3 rounds) may draw too few changes.
  if (rounds < 20) return;
  EXPECT_GT(want.retired().size(), size_t(c.batch)) << "requests should retire along the way";
  EXPECT_GT(buckets.size(), 2u) << "the batches should cross buckets";
}

}  // namespace kdagraph::test
