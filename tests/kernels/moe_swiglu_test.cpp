// moe_swiglu on the default target (the GPU where there is one, else the CPU), bf16 and
// f8e4m3: fresh random gate/up rows against SwiGLU computed on the host, every element of the
// rows the routing uses (bf16: and none past them written; f8: no scale past them written);
// the f8 form's codes and per-128-column scales against the host's quantization of the host's
// values (reference::quantize_f8_blocks' rule): each scale within 2^-22 relative, each code the
// host's, except where the host's value lies within 1e-6 of a rounding boundary (either code
// may be right there; not checked).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/moe.h"
#include "kernels/reference.h"
#include "tests/kernels/moe_check.h"

namespace tiledist {
namespace {

template <class T>
std::vector<T> read(const T* p, size_t n) {
  return testing_moe::read_back(Target::default_target(), p, n);
}

/// Device (or host) memory holding `v` for the default target.
template <class T>
struct Mem {
  explicit Mem(const std::vector<T>& v) : host(v) {
    if (kernels::detail::on_gpu(Target::default_target())) dev = std::make_unique<cuda::Buffer<T>>(v);
  }
  T* ptr() { return dev ? dev->data() : host.data(); }
  std::vector<T> host;
  std::unique_ptr<cuda::Buffer<T>> dev;
};

void check_swiglu(int64_t rows, int64_t used, int64_t I, ir::DType dtype) {
  SCOPED_TRACE(str_cat("rows=", rows, " used=", used, " I=", I, " ", ir::dtype_name(dtype)));
  const bool f8 = dtype == ir::DType::f8e4m3;
  const int br = 16, bi = f8 ? 128 : 256;
  const int64_t kb = (I + 127) / 128;
  Kernel k = compile(kernels::moe_swiglu_kernel(dtype), {{"BR", br}, {"BI", bi}});
  std::vector<float> r = reference::random_floats(size_t(rows * 2 * I));
  std::vector<bf16> gu(r.size());
  for (size_t i = 0; i < r.size(); ++i) gu[i] = bf16(r[i] * 40);  // (silu's both sides, large products)
  Mem<bf16> gu_in(gu);
  Mem<int32_t> starts(std::vector<int32_t>{0, int32_t(used)});  // G = 1: starts[1] = the rows used
  Mem<float> scales(std::vector<float>(size_t(rows * kb), -1.0f));
  Mem<bf16> act16(std::vector<bf16>(size_t(rows * I), bf16(-7.0f)));
  Mem<f8e4m3> act8(std::vector<f8e4m3>(size_t(rows * I), f8e4m3(-7.0f)));
  const Grid grid(int((rows + br - 1) / br), int((I + bi - 1) / bi));
  const bool gpu = kernels::detail::on_gpu(Target::default_target());
  auto launch = [&](auto* act) {
    if (gpu)
      k.launch_on(runtime::Stream::legacy(), grid, cuda::DevicePtr<const bf16>{gu_in.ptr(), 0},
                  cuda::DevicePtr<std::remove_pointer_t<decltype(act)>>{act, 0},
                  cuda::DevicePtr<float>{scales.ptr(), 0}, cuda::DevicePtr<int32_t>{starts.ptr(), 0}, 1, int(I));
    else
      k.launch(grid, static_cast<const bf16*>(gu_in.ptr()), act, scales.ptr(), starts.ptr(), 1, int(I));
  };
  if (f8)
    launch(act8.ptr());
  else
    launch(act16.ptr());
  if (gpu) runtime::Stream::legacy().synchronize();
  const auto got_scales = read(scales.ptr(), scales.host.size());
  const auto got8 = read(act8.ptr(), act8.host.size());
  const auto got16 = read(act16.ptr(), act16.host.size());
  size_t bad = 0;
  for (int64_t row = 0; row < rows; ++row) {
    std::vector<float> want(static_cast<size_t>(I));
    for (int64_t i = 0; i < I; ++i) {
      const double g = float(gu[size_t(row * 2 * I + i)]), u = float(gu[size_t(row * 2 * I + I + i)]);
      want[size_t(i)] = float(g / (1 + std::exp(-g)) * u);
    }
    for (int64_t b = 0; b < kb && f8; ++b) {
      float amax = 0;
      for (int64_t i = b * 128; i < std::min(I, b * 128 + 128); ++i) amax = std::max(amax, std::abs(want[size_t(i)]));
      const float s = reference::f8_scale(amax), got_s = got_scales[size_t(row * kb + b)];
      if (row >= used) {
        if (got_s != -1.0f && bad++ < 5) ADD_FAILURE() << "scale of unused row " << row << " written";
        continue;
      }
      if (!(std::abs(got_s - s) <= std::ldexp(s, -22)) && bad++ < 5)
        ADD_FAILURE() << "row " << row << " block " << b << ": scale " << got_s << ", want " << s;
      for (int64_t i = b * 128; i < std::min(I, b * 128 + 128); ++i) {
        const float q = want[size_t(i)] * reference::f8_inverse_scale(amax), code = float(f8e4m3(q)),
                    got = float(got8[size_t(row * I + i)]);
        const bool near_boundary = float(f8e4m3(q * (1 + 1e-6f))) != code || float(f8e4m3(q * (1 - 1e-6f))) != code;
        if (got != code && !near_boundary && bad++ < 5)
          ADD_FAILURE() << "row " << row << " column " << i << ": code " << got << ", want " << code << " (" << q
                        << " of scale " << s << ")";
      }
    }
    for (int64_t i = 0; i < I && !f8; ++i) {
      const float got = float(got16[size_t(row * I + i)]);
      const float w = row < used ? want[size_t(i)] : -7.0f;
      if (!(std::abs(got - w) <= std::ldexp(std::abs(w), -7)) && bad++ < 5)
        ADD_FAILURE() << "row " << row << " column " << i << ": " << got << ", want " << w;
    }
  }
  EXPECT_EQ(bad, 0u);
}

TEST(MoeSwiglu, Bf16) { check_swiglu(45, 37, 300, ir::DType::bf16); }
TEST(MoeSwiglu, F8Quantized) {
  check_swiglu(45, 37, 300, ir::DType::f8e4m3);  // the last block of 44 columns
  check_swiglu(64, 64, 256, ir::DType::f8e4m3);
  check_swiglu(20, 3, 96, ir::DType::f8e4m3);  // one partial block
}

}  // namespace
}  // namespace tiledist
