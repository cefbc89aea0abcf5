// The device-side operations of the SIMT executor (simt/executor.h, called through
// simt/device.h and simt/launch.h): the block barrier, the warp exchange, cp.async, the
// global-memory checks and programmatic dependent launch's wait and trigger.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "simt/block.h"
#include "simt/shared_memory.h"

namespace kdagraph::simt {

using detail::Barrier;
using detail::Block;
using detail::Copy;
using detail::current_lane;
using detail::fail;
using detail::kWarpSize;
using detail::Lane;
using detail::release;
using detail::same_site;
using detail::site;
using detail::sync_lock;
using detail::WaitKind;
using detail::Warp;

void syncthreads(const char* file, int line) {
  Lane& self = current_lane();
  Block& b = *self.block;
  Barrier& br = b.barrier;
  auto lk = sync_lock(b, br.m);
  if (br.exited > 0)
    fail(self, "__syncthreads at " + site(file, line) + " after " + std::to_string(br.exited) +
                   " threads of the block exited: every thread must reach it");
  if (br.arrived == 0) {
    br.file = file;
    br.line = line;
  } else if (!same_site(br.file, br.line, file, line)) {
    fail(self, "__syncthreads at " + site(file, line) + " while other threads wait at the one at " +
                   site(br.file, br.line));
  }
  if (++br.arrived == b.threads) {
    br.arrived = 0;
    for (Lane* w : br.waiting) release(*w);
    br.waiting.clear();
    if (b.engine == Lanes::threads) br.cv.notify_all();
    return;
  }
  br.waiting.push_back(&self);
  wait(self, lk, br.cv, WaitKind::barrier, file, line);
}

uint64_t shfl_xor(uint32_t mask, uint64_t bits, int lane_mask, int width, const char* file, int line) {
  Lane& self = current_lane();
  Warp& w = *self.warp;
  const uint32_t me = 1u << self.lane;
  auto call = [&] { return "__shfl_xor_sync at " + site(file, line); };
  auto lk = sync_lock(*self.block, w.m);
  if (!(mask & me)) fail(self, call() + " with a mask that does not name the calling lane");
  if (mask & ~w.present) fail(self, call() + " names lanes that do not exist in this warp");
  if (mask & w.exited) fail(self, call() + " names lanes that have exited");
  if (width < 1 || width > kWarpSize || (width & (width - 1)) != 0)
    fail(self, call() + " with width " + std::to_string(width) + ", not a power of two up to 32");
  if (w.open == 0) {
    w.open = mask;
    w.arrived = 0;
    w.file = file;
    w.line = line;
  } else if (w.open != mask || !same_site(w.file, w.line, file, line)) {
    char masks[64];
    std::snprintf(masks, sizeof masks, "0x%08x, others 0x%08x", mask, w.open);
    fail(self, "divergent warp: " + call() + " (mask " + masks + " at " + site(w.file, w.line) + ")");
  }
  // CUDA's rule: the source lane is lane ^ lane_mask, or the lane itself when that lies past its
  // segment of `width` lanes.
  const int segment_end = (self.lane & ~(width - 1)) + width - 1;
  const int src = self.lane ^ (lane_mask & (kWarpSize - 1));
  w.source[self.lane] = src > segment_end ? self.lane : src;
  w.value[self.lane] = bits;
  w.arrived |= me;
  if (w.arrived == mask) {
    for (int l = 0; l < kWarpSize; ++l) {
      if (!(mask & (1u << l))) continue;
      if (!(mask & (1u << w.source[l])))
        fail(self, call() + ": lane " + std::to_string(l) + " reads lane " + std::to_string(w.source[l]) +
                       ", which the mask does not name");
      w.result[l] = w.value[w.source[l]];
    }
    w.open = 0;
    for (int l = 0; l < kWarpSize; ++l)
      if ((mask & (1u << l)) && l != self.lane) release(*w.lanes[l]);
    if (self.block->engine == Lanes::threads) w.cv.notify_all();
  } else {
    wait(self, lk, w.cv, WaitKind::shuffle, file, line);
  }
  return w.result[self.lane];
}

void pipeline_memcpy_async(void* dst, const void* src, size_t bytes, size_t zfill, const char* file, int line) {
  Lane& self = current_lane();
  auto call = [&] { return "__pipeline_memcpy_async at " + site(file, line); };
  if (bytes != 4 && bytes != 8 && bytes != 16)
    fail(self, call() + " of " + std::to_string(bytes) + " bytes: cp.async moves 4, 8 or 16");
  if (zfill > bytes) fail(self, call() + " zero-fills more than it copies");
  if (reinterpret_cast<uintptr_t>(dst) % bytes != 0 || reinterpret_cast<uintptr_t>(src) % bytes != 0)
    fail(self, call() + ": source or destination not aligned to " + std::to_string(bytes) + " bytes");
  if (!detail::in_shared(dst, bytes)) fail(self, call() + ": the destination is not __shared__ memory");
  if (detail::in_shared(src, bytes)) fail(self, call() + ": the source is __shared__ memory");
  Copy c{dst, {}, bytes, zfill, self.commits, file, line};
  std::memcpy(c.data, src, bytes - zfill);
  self.copies.push_back(c);
}

void pipeline_commit() { ++current_lane().commits; }

void pipeline_wait_prior(size_t prior, const char* file, int line) {
  (void)file, (void)line;
  Lane& self = current_lane();
  // Batches older than the `prior` most recent committed ones land now; uncommitted copies stay queued.
  const int first_pending = self.commits - int(prior);
  auto landed = [&](const Copy& c) { return c.batch < first_pending; };
  for (const Copy& c : self.copies) {
    if (!landed(c)) continue;
    std::memcpy(c.dst, c.data, c.bytes - c.zfill);
    std::memset(static_cast<char*>(c.dst) + (c.bytes - c.zfill), 0, c.zfill);
  }
  self.copies.erase(std::remove_if(self.copies.begin(), self.copies.end(), landed), self.copies.end());
}

void check_global_access(const void* ptr, size_t align, const char* what, const char* file, int line) {
  Lane& self = current_lane();
  if (reinterpret_cast<uintptr_t>(ptr) % align != 0)
    fail(self, std::string(what) + " at " + site(file, line) + " of an address not aligned to " +
                   std::to_string(align) + " bytes");
  if (detail::in_shared(ptr, align)) fail(self, std::string(what) + " at " + site(file, line) + " on __shared__ memory");
}

void grid_dependency_wait(const char* file, int line) {
  Lane& self = current_lane();
  self.grid_waited = true;
  if (self.block->hold_at_wait) detail::hold_at_grid_dependency(self, file, line);
}

void trigger_dependent_launch(const char* file, int line) {
  Lane& self = current_lane();
  if (!self.grid_waited)
    fail(self, "trigger_dependent_launch at " + site(file, line) +
                   " before grid_dependency_wait: a kernel may let its dependents start only after its own wait, "
                   "or their reads above their wait race the kernel before it (docs/graphs.md)");
}

}  // namespace kdagraph::simt
