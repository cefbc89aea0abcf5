# GPU twins of the kernel tests, and the Verifier on the CUDA backend (label gpu). Each reports SKIPPED
# where no device is visible. None needs device code of its own, so they are C++ sources.
kdagraph_add_test(verify_cuda_test gpu kernels/verify_cuda_test.cpp)
kdagraph_add_test(indices_cuda_test gpu kernels/indices_cuda_test.cpp)
kdagraph_add_test(state_copy_cuda_test gpu kernels/state_copy_cuda_test.cpp)
kdagraph_add_test(accept_cuda_test gpu kernels/accept_cuda_test.cpp)
kdagraph_add_test(verifier_cuda_test gpu graph/verifier_cuda_test.cpp)
kdagraph_add_test(graph_runner_cuda_test gpu graph/graph_runner_cuda_test.cu)
