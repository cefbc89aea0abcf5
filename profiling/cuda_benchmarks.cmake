# GPU benchmarks: plain programs (CUDA events, medians), so they build without Google Benchmark.
add_executable(bench_verify_cuda bench_verify_cuda.cu)
target_link_libraries(bench_verify_cuda PRIVATE kdagraph kdagraph_internal kdagraph_warnings)
