#include "harness/synthetic.h"

namespace kdagraph {

void synthetic_inputs_cpu(const SyntheticInputParams& p) {
  const int64_t total = synthetic_inputs_elements(p);
  if (p.io_dtype == DType::f32) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < total; ++i) synthetic_inputs_element<float>(p, i);
  } else if (p.io_dtype == DType::f16) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < total; ++i) synthetic_inputs_element<math::f16>(p, i);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < total; ++i) synthetic_inputs_element<math::bf16>(p, i);
  }
}

void synthetic_state_cpu(const SyntheticStateParams& p) {
  const int64_t total = synthetic_state_elements(p);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < total; ++i) synthetic_state_element(p, i);
}

void synthetic_sampler_cpu(const SyntheticSamplerParams& p) {
  const uint32_t round = uint32_t(*p.round);
  for (int32_t n = 0; n < p.rows; ++n) synthetic_sample_row(p, round, n);
  *p.round += 1;
}

void synthetic_tree_cpu(const SyntheticTreeParams& p) {
  for (int32_t n = 0; n < p.rows; ++n) synthetic_tree_row(p, n);
}

}  // namespace kdagraph
