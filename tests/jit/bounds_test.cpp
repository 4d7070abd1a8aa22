// TILEDIST_CHECK_BOUNDS=1: an out-of-bounds access is reported with the kernel, program id and
// offset, and is not performed.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tiledist.h"

namespace tiledist {
namespace {

void shifted_copy(tl::Ptr<float> x, tl::Ptr<float> y, tl::Int shift, tl::Int n) {
  auto offs = tl::program_id(0) * 16 + tl::arange(0, 16);
  tl::store(y + offs, tl::load(x + offs + shift, offs < n), offs < n);
}
const KernelDef kCopy("shifted_copy", shifted_copy, {"x", "y", "shift", "n"});

void expect_message(const std::function<void()>& fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

CompileOptions checked() {
  CompileOptions o;
  o.check_bounds = true;
  return o;
}

TEST(Bounds, OutOfBoundsLoadIsReported) {
  std::vector<float> x(64, 1.0f), y(64, 0.0f);
  auto k = compile(kCopy, {}, Target::host(), checked());
  k.launch({4}, x, y, 0, 64);  // in bounds: fine
  expect_message([&] { k.launch({4}, x, y, 6, 64); },
                 "out-of-bounds load in kernel 'shifted_copy', program (3, 0, 0): element offset 64 of argument 'x' "
                 "(64 elements)");
}

TEST(Bounds, MaskedLanesAreNotReported) {
  std::vector<float> x(50, 1.0f), y(50, 0.0f);
  compile(kCopy, {}, Target::host(), checked()).launch({4}, x, y, 0, 50);
  for (float v : y) EXPECT_EQ(v, 1.0f);
}

TEST(Bounds, OutOfBoundsStoreIsNotPerformed) {
  std::vector<float> x(64, 1.0f), y(80, -1.0f);
  std::span<float> y_head(y.data(), 48);  // the kernel is told y holds 48 elements
  expect_message([&] { compile(kCopy, {}, Target::host(), checked()).launch({4}, x, y_head, 0, 64); },
                 "out-of-bounds store in kernel 'shifted_copy', program (3, 0, 0): element offset 48 of argument 'y'");
  for (int i = 48; i < 80; ++i) EXPECT_EQ(y[i], -1.0f) << "memory past the buffer was written at " << i;
}

TEST(Bounds, NegativeOffsetsAreReported) {
  std::vector<float> x(64, 1.0f), y(64);
  expect_message([&] { compile(kCopy, {}, Target::host(), checked()).launch({1}, x, y, -3, 64); },
                 "element offset -3 of argument 'x'");
}

TEST(Bounds, RawPointersNeedAnExtent) {
  std::vector<float> x(64), y(64);
  expect_message([&] { compile(kCopy, {}, Target::host(), checked()).launch({1}, x.data(), y, 0, 64); },
                 "argument 0 ('x') of kernel 'shifted_copy': TILEDIST_CHECK_BOUNDS=1 needs the buffer's extent");
}

TEST(Bounds, EnabledByTheEnvironment) {
  setenv("TILEDIST_CHECK_BOUNDS", "1", 1);
  CompileOptions o = CompileOptions::from_env();
  unsetenv("TILEDIST_CHECK_BOUNDS");
  EXPECT_TRUE(o.check_bounds);
  EXPECT_FALSE(CompileOptions::from_env().check_bounds);
  std::vector<float> x(16), y(16);
  expect_message([&] { compile(kCopy, {}, Target::host(), o).launch({2}, x, y, 0, 32); }, "program (1, 0, 0)");
}

}  // namespace
}  // namespace tiledist
