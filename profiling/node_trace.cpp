#include "profiling/node_trace.h"

#include <cupti.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

#include "kdagraph/error.hpp"

namespace kdagraph::profiling {

namespace {

// CUPTI calls its buffer callbacks on its own thread, as plain functions: the records they deliver
// land here.
struct Collector {
  std::mutex mutex;
  std::vector<NodeRecord> records;
  size_t without_time = 0;  // records CUPTI delivered with no valid start and end
};
Collector& collector() {
  static Collector c;
  return c;
}
std::atomic<bool> tracing{false};

constexpr size_t kBufferBytes = size_t(8) << 20;
constexpr size_t kBufferAlign = 8;  // CUPTI's record alignment

void check(CUptiResult r, const char* call) {
  if (r == CUPTI_SUCCESS) return;
  const char* message = nullptr;
  cuptiGetResultString(r, &message);
  throw Error(std::string("node trace: ") + call + " failed: " + (message ? message : "unknown CUPTI error"));
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

template <class Record>
void add(const Record& r) {
  if (r.graphId == 0) return;  // not launched by a graph
  std::lock_guard<std::mutex> lock(collector().mutex);
  if (r.start == 0 || r.end < r.start) {  // CUPTI writes 0 where it has no timestamp
    ++collector().without_time;
    return;
  }
  collector().records.push_back(NodeRecord{r.graphId, r.graphNodeId, NodeInterval{r.start, r.end}});
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL:
        add(*reinterpret_cast<const CUpti_ActivityKernel10*>(record));
        break;
      case CUPTI_ACTIVITY_KIND_MEMSET:
        add(*reinterpret_cast<const CUpti_ActivityMemset4*>(record));
        break;
      case CUPTI_ACTIVITY_KIND_MEMCPY:
        add(*reinterpret_cast<const CUpti_ActivityMemcpy6*>(record));
        break;
      default:
        break;
    }
  }
  std::free(buffer);
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMSET,
                                         CUPTI_ACTIVITY_KIND_MEMCPY};

}  // namespace

NodeTrace::NodeTrace() {
  if (tracing.exchange(true)) throw Error("node trace: one NodeTrace at a time");
  try {
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
          "cuptiActivityRegisterCallbacks");
    for (CUpti_ActivityKind kind : kKinds) check(cuptiActivityEnable(kind), "cuptiActivityEnable");
  } catch (...) {
    for (CUpti_ActivityKind kind : kKinds) cuptiActivityDisable(kind);
    tracing = false;
    throw;
  }
  std::lock_guard<std::mutex> lock(collector().mutex);
  collector().records.clear();
  collector().without_time = 0;
}

NodeTrace::~NodeTrace() {
  for (CUpti_ActivityKind kind : kKinds) cuptiActivityDisable(kind);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(collector().mutex);
  collector().records.clear();
  collector().without_time = 0;
  tracing = false;
}

std::vector<LaunchTimeline> NodeTrace::take() {
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  size_t dropped = 0;
  check(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped), "cuptiActivityGetNumDroppedRecords");
  if (dropped != 0) throw Error("node trace: CUPTI dropped " + std::to_string(dropped) + " records");
  std::vector<NodeRecord> records;
  size_t without_time = 0;
  {
    std::lock_guard<std::mutex> lock(collector().mutex);
    records.swap(collector().records);
    std::swap(without_time, collector().without_time);
  }
  if (without_time != 0)
    throw Error("node trace: CUPTI delivered " + std::to_string(without_time) +
                " graph node records without timestamps");
  return split_launches(std::move(records));
}

}  // namespace kdagraph::profiling
