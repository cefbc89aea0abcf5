# GPU benchmarks: registered by the CUDA kernels work.
