#include "kernels/accept.h"

namespace kdagraph {

void accept_cpu(const AcceptParams& p) {
  for (int32_t n = 0; n < p.rows; ++n) accept_row(p, n);
}

}  // namespace kdagraph
