# GPU tests: registered by the CUDA kernels work (label gpu).
