# GPU twins of the kernel tests, and the Verifier on the CUDA backend (label gpu). Each reports SKIPPED
# where no device is visible.
kdagraph_add_test(verify_cuda_test gpu kernels/verify_cuda_test.cpp)
kdagraph_add_test(conv_cuda_test gpu kernels/conv_cuda_test.cpp)
kdagraph_add_test(indices_cuda_test gpu kernels/indices_cuda_test.cpp)
kdagraph_add_test(state_copy_cuda_test gpu kernels/state_copy_cuda_test.cpp)
kdagraph_add_test(accept_cuda_test gpu kernels/accept_cuda_test.cpp)
kdagraph_add_test(verifier_cuda_test gpu graph/verifier_cuda_test.cpp)
kdagraph_add_test(ops_cuda_test gpu graph/ops_cuda_test.cpp)
kdagraph_add_test(graph_runner_cuda_test gpu graph/graph_runner_cuda_test.cu)
if(TARGET CUDA::cupti)
  kdagraph_add_test(node_trace_cuda_test gpu profiling/node_trace_cuda_test.cu)
  target_link_libraries(node_trace_cuda_test PRIVATE kdagraph_node_trace)
endif()
