// The library's elementwise and row kernels (add, softmax, layernorm) on the CPU backend, at
// ragged sizes where masks matter, against host references computed in double precision. Fresh
// random inputs each run (the seed is printed on failure).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/kernels.h"
#include "kernels/reference.h"

namespace tiledist {
namespace {
namespace ref = tiledist::reference;

TEST(Add, RaggedSizes) {
  for (int block : {16, 1024})
    for (int n : {1, 15, 17, 1023, 1025, 100003}) {
      auto x = ref::random_floats(n), y = ref::random_floats(n);
      std::vector<float> out(n + 7, 12345.0f), want;  // past n must stay untouched
      compile(kernels::add_kernel(), {{"BLOCK", block}})
          .launch({tl::cdiv(n, block)}, x, y, std::span<float>(out.data(), n + 7), n);
      ref::add(x, y, want);
      std::vector<float> head(out.begin(), out.begin() + n);
      EXPECT_EQ(ref::rel_error(head, want), 0.0) << "n=" << n << " block=" << block << " seed " << ref::last_seed();
      for (int i = n; i < n + 7; ++i) ASSERT_EQ(out[i], 12345.0f) << "wrote past the end at " << i;
    }
}

TEST(Softmax, RaggedRows) {
  for (auto [rows, cols, block] : {std::tuple{1, 1, 16}, {7, 100, 128}, {33, 1000, 1024}, {5, 1024, 1024}}) {
    int stride = cols + 3;  // rows are padded: the stride is not the width
    auto x = ref::random_floats(size_t(rows) * stride, -8, 8);
    std::vector<float> out(x.size(), -7.0f);
    compile(kernels::softmax_kernel(), {{"BLOCK", block}}).launch({rows}, x, out, cols, stride);
    std::vector<float> packed(size_t(rows) * cols), got(size_t(rows) * cols), want;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        packed[size_t(r) * cols + c] = x[size_t(r) * stride + c];
        got[size_t(r) * cols + c] = out[size_t(r) * stride + c];
      }
    ref::softmax(packed, want, rows, cols);
    EXPECT_LT(ref::rel_error(got, want), 1e-5) << rows << "x" << cols << " seed " << ref::last_seed();
    for (int r = 0; r < rows; ++r)
      for (int c = cols; c < stride; ++c) ASSERT_EQ(out[size_t(r) * stride + c], -7.0f);
  }
}

TEST(LayerNorm, RaggedRows) {
  for (auto [rows, cols, block] : {std::tuple{1, 3, 16}, {9, 129, 64}, {64, 1000, 256}}) {
    auto x = ref::random_floats(size_t(rows) * cols, -4, 6), w = ref::random_floats(cols), b = ref::random_floats(cols);
    std::vector<float> y(x.size()), want;
    compile(kernels::layernorm_kernel(), {{"BLOCK", block}}).launch({rows}, x, w, b, y, cols, 1e-5f);
    ref::layernorm(x, w, b, want, rows, cols, 1e-5f);
    EXPECT_LT(ref::rel_error(y, want), 1e-5) << rows << "x" << cols << " seed " << ref::last_seed();
  }
}

}  // namespace
}  // namespace tiledist
