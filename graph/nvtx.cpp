#include "graph/nvtx.h"

#if defined(KDAGRAPH_WITH_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace kdagraph::nvtx {

const char* name(Range r) {
  static const char* const kNames[] = {"capture", "instantiate", "replay", "eager_round",
                                       "index_build", "layer", "accept", "commit",
                                       "materialize", "prefill", "conv"};
  static_assert(sizeof kNames / sizeof kNames[0] == int(Range::count_), "one name per range");
  return kNames[int(r)];
}

#if defined(KDAGRAPH_WITH_NVTX)
namespace {

struct Domain {
  nvtxDomainHandle_t handle;
  nvtxStringHandle_t names[int(Range::count_)];
  Domain() : handle(nvtxDomainCreateA("kdagraph")) {
    for (int i = 0; i < int(Range::count_); ++i)
      names[i] = nvtxDomainRegisterStringA(handle, name(Range(i)));
  }
};

const Domain& domain() {
  static const Domain d;
  return d;
}

}  // namespace

void push(Range r, int64_t payload, bool has_payload) {
  const Domain& d = domain();
  nvtxEventAttributes_t attr = {};
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  attr.message.registered = d.names[int(r)];
  if (has_payload) {
    attr.payloadType = NVTX_PAYLOAD_TYPE_INT64;
    attr.payload.llValue = payload;
  }
  nvtxDomainRangePushEx(d.handle, &attr);
}

void pop() { nvtxDomainRangePop(domain().handle); }
#endif

}  // namespace kdagraph::nvtx
