// An independent fp64 reference of docs/conv.md's short convolution, written from the formula and sharing
// no code with kernels/conv.h: the conv of one request is a function of its input sequence, so the
// reference keeps each request's last W - 1 inputs as values, not as columns of a layout.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace kdagraph::test {

struct RefConv {
  int channels = 0, width = 0;
  std::vector<double> weight;  // [C][W]
  std::vector<double> bias;    // [C] or empty
  bool silu = true;
};

// y_t[c] = act(sum_{j<W} w[c][j] x_{t-W+1+j}[c] + bias[c]), where the inputs before x_1 are `before`
// (the W - 1 last inputs, oldest first) and x holds the round's T inputs, each [C].
inline std::vector<std::vector<double>> ref_conv(const RefConv& r, const std::vector<std::vector<double>>& before,
                                                 const std::vector<std::vector<double>>& x) {
  std::vector<std::vector<double>> seq = before;
  seq.insert(seq.end(), x.begin(), x.end());
  const size_t W = size_t(r.width), C = size_t(r.channels);
  std::vector<std::vector<double>> y(x.size(), std::vector<double>(C));
  for (size_t t = 0; t < x.size(); ++t)
    for (size_t c = 0; c < C; ++c) {
      double z = r.bias.empty() ? 0.0 : r.bias[c];
      for (size_t j = 0; j < W; ++j) z += r.weight[c * W + j] * seq[t + j][c];  // seq[t + W - 1] is x_t
      y[t][c] = r.silu ? z / (1.0 + std::exp(-z)) : z;
    }
  return y;
}

// The last W - 1 inputs of a request after it accepted `a` of the round's inputs x (a = 0: none).
inline std::vector<std::vector<double>> ref_after_accept(const std::vector<std::vector<double>>& before,
                                                         const std::vector<std::vector<double>>& x, int a) {
  std::vector<std::vector<double>> seq = before;
  seq.insert(seq.end(), x.begin(), x.begin() + a);
  return std::vector<std::vector<double>>(seq.end() - ptrdiff_t(before.size()), seq.end());
}

}  // namespace kdagraph::test
