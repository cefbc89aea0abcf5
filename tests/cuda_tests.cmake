# The CUDA runner's programs (label gpu; tests/common/runner.h [TAG_RUNNERS]), and the GPU's own tests.
# Each reports SKIPPED where no device is visible.
kdagraph_add_runner_test(kernels_cuda_test gpu cuda ${KDAGRAPH_KERNEL_CASES} common/runner_cuda.cpp)
kdagraph_add_runner_test(graph_cuda_test gpu cuda ${KDAGRAPH_GRAPH_CASES} common/runner_cuda.cpp)
kdagraph_add_test(graph_runner_cuda_test gpu graph/graph_runner_cuda_test.cu)
kdagraph_add_test(pdl_cuda_test gpu graph/pdl_cuda_test.cpp)
kdagraph_add_runner_test(eager_alloc_cuda_test gpu cuda graph/eager_alloc_test.cpp common/allocation_counter.cpp
                         common/runner_cuda.cpp)
if(TARGET CUDA::cupti)
  kdagraph_add_test(node_trace_cuda_test gpu profiling/node_trace_cuda_test.cu)
  target_link_libraries(node_trace_cuda_test PRIVATE kdagraph_node_trace)
endif()
