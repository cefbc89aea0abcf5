// Stands in for the toolkit's cuda_runtime.h in code compiled for the SIMT executor.
#pragma once
#include "simt/device.h"
