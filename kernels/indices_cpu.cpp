#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "kernels/indices.h"

namespace kdagraph {

void build_indices_cpu(const IndexBuildParams& p) {
  thrust::for_each_n(thrust::host, thrust::counting_iterator<int32_t>(0), p.rows, BuildIndices{p});
}

void build_slot_indices_cpu(const SlotIndexParams& p) {
  thrust::for_each_n(thrust::host, thrust::counting_iterator<int32_t>(0), p.rows, BuildSlotIndices{p});
}

}  // namespace kdagraph
