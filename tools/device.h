// The copy bandwidth a command compares its state traffic with. (Streams and events: kernels/stream.h.)
#pragma once

#include "kdagraph/types.hpp"

namespace kdagraph::cli {

// Measured copy bandwidth in GB/s counting bytes read plus bytes written (the unit of docs/shapes.md's state
// transfers): device-to-device cudaMemcpy on CUDA, memcpy of host memory on the CPU.
double copy_ceiling_gbs(Backend backend);

}  // namespace kdagraph::cli
