// placeholder until the CUDA kernels land
