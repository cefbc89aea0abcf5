#include "harness/synthetic.h"

#include "kernels/launch.cuh"

namespace kdagraph {
namespace {

template <class IoT>
__global__ void synthetic_inputs_kernel(SyntheticInputParams p) {
  grid_dependency_wait();
  trigger_dependent_launch();
  const int64_t total = synthetic_inputs_elements(p);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    synthetic_inputs_element<IoT>(p, i);
}

// One block: every row reads the round, then thread 0 advances it after the barrier.
__global__ void synthetic_sampler_kernel(SyntheticSamplerParams p) {
  grid_dependency_wait();
  trigger_dependent_launch();
  const uint32_t round = uint32_t(*p.round);
  for (int32_t n = threadIdx.x; n < p.rows; n += blockDim.x) synthetic_sample_row(p, round, n);
  __syncthreads();
  if (threadIdx.x == 0) *p.round = int64_t(round) + 1;
}

__global__ void synthetic_tree_kernel(SyntheticTreeParams p) {
  grid_dependency_wait();
  trigger_dependent_launch();
  for (int32_t n = int32_t(blockIdx.x * blockDim.x + threadIdx.x); n < p.rows; n += int32_t(gridDim.x * blockDim.x))
    synthetic_tree_row(p, n);
}

__global__ void synthetic_state_kernel(SyntheticStateParams p) {
  const int64_t total = synthetic_state_elements(p);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    synthetic_state_element(p, i);
}

}  // namespace

cudaError_t launch_synthetic_inputs(const SyntheticInputParams& p, Launch on) {
  const int64_t total = synthetic_inputs_elements(p);
  const int threads = 256;
  const int blocks = int((total + threads - 1) / threads < 4096 ? (total + threads - 1) / threads : 4096);
  switch (p.io_dtype) {
    case DType::f32: return launch_kernel(synthetic_inputs_kernel<float>, blocks, threads, on, p);
    case DType::f16: return launch_kernel(synthetic_inputs_kernel<math::f16>, blocks, threads, on, p);
    case DType::bf16: break;
  }
  return launch_kernel(synthetic_inputs_kernel<math::bf16>, blocks, threads, on, p);
}

cudaError_t launch_synthetic_state(const SyntheticStateParams& p, Launch on) {
  const int threads = 256, blocks = 1024;
  return launch_kernel(synthetic_state_kernel, blocks, threads, on, p);
}

cudaError_t launch_synthetic_tree(const SyntheticTreeParams& p, Launch on) {
  return launch_kernel(synthetic_tree_kernel, (p.rows + 63) / 64, 64, on, p);
}

cudaError_t launch_synthetic_sampler(const SyntheticSamplerParams& p, Launch on) {
  return launch_kernel(synthetic_sampler_kernel, 1, 256, on, p);
}

}  // namespace kdagraph
