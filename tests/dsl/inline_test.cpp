// A kernel's body traced into another (KernelDef::inline_body) as a program of its own grid
// (dsl::ProgramScope): what the mega kernel (mega/) is built from. Run on the CPU backend
// against the kernel launched alone; the scope's values in the IR; misuse refused.
#include <gtest/gtest.h>

#include "ir/printer.h"
#include "kernels/reference.h"
#include "tiledist.h"

namespace tiledist {
namespace {

// y = x · (program + 1) / programs, BLOCK elements a program: its result says which program of
// how many wrote each element.
void scaled(tl::Ptr<float> x, tl::Ptr<float> y, tl::Int n, tl::Const<int> BLOCK) {
  auto i = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
  auto f = (tl::program_id(0) + 1).to(tl::float32) / tl::num_programs(0).to(tl::float32);
  tl::store(y + i, tl::load(x + i, i < n, 0.0f) * f, i < n);
}
const KernelDef kScaled("scaled", scaled, {"x", "y", "n", "BLOCK"}, {{"BLOCK", 32}});

// One program running `tiles` programs of `scaled` in turn, each in its own scope.
std::unique_ptr<KernelDef> inlined(int tiles) {
  const std::vector<ParamInfo> params = {{"x", ParamKind::pointer, ir::Type::ptr(ir::DType::f32)},
                                         {"y", ParamKind::pointer, ir::Type::ptr(ir::DType::f32)},
                                         {"n", ParamKind::scalar, ir::Type::scalar(ir::DType::i32)}};
  return std::make_unique<KernelDef>(
      "inlined", params, [tiles](const std::vector<ir::Value*>& v, const std::vector<const ConstValue*>&) {
        for (int t = 0; t < tiles; ++t) {
          dsl::ProgramScope scope({tl::scalar(t, tl::int32).value(), nullptr, nullptr},
                                  {tl::scalar(tiles, tl::int32).value(), nullptr, nullptr});
          kScaled.inline_body(v, {});
        }
      });
}

TEST(Inline, ABodyRunsAsTheProgramsOfItsOwnGrid) {
  for (int n : {1, 37, 96}) {
    const int tiles = (n + 31) / 32;
    const std::vector<float> x = reference::random_floats(static_cast<size_t>(n));
    std::vector<float> alone(static_cast<size_t>(n)), in_one(static_cast<size_t>(n));
    compile(kScaled).launch({tiles}, x, alone, n);
    const std::unique_ptr<KernelDef> def = inlined(tiles);
    compile(*def).launch({1}, x, in_one, n);
    for (int i = 0; i < n; ++i) ASSERT_EQ(in_one[size_t(i)], alone[size_t(i)]) << "n=" << n << " element " << i;
  }
}

TEST(Inline, TheScopesValuesStandForTheProgramsOwn) {
  const std::string text = ir::print(*inlined(2)->trace({}));
  EXPECT_EQ(text.find("program_id"), std::string::npos) << text;
  EXPECT_EQ(text.find("num_programs"), std::string::npos) << text;
  // (an axis the scope leaves null is the kernel's own)
  const std::vector<ParamInfo> params = {{"x", ParamKind::pointer, ir::Type::ptr(ir::DType::f32)}};
  const KernelDef own("own", params, [](const std::vector<ir::Value*>& v, const std::vector<const ConstValue*>&) {
    dsl::ProgramScope scope({nullptr, nullptr, nullptr}, {nullptr, nullptr, nullptr});
    tl::store(tl::Ptr<float>(v[0]) + tl::program_id(0), 1.0f);
  });
  EXPECT_NE(ir::print(*own.trace({})).find("program_id"), std::string::npos);
}

TEST(Inline, ArgumentsThatDoNotFitAreRefused) {
  auto error = [](std::vector<ParamInfo> params) {
    try {
      KernelDef(
          "outer", std::move(params),
          [](const std::vector<ir::Value*>& v, const std::vector<const ConstValue*>&) { kScaled.inline_body(v, {}); })
          .trace({});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const ParamInfo x{"x", ParamKind::pointer, ir::Type::ptr(ir::DType::f32)};
  EXPECT_EQ(error({x, x}), "tiledist: kernel 'scaled' inlined with 2 arguments: its parameter 'n' (i32) has none");
  EXPECT_EQ(error({x,
                   {"y", ParamKind::pointer, ir::Type::ptr(ir::DType::bf16)},
                   {"n", ParamKind::scalar, ir::Type::scalar(ir::DType::i32)}}),
            "tiledist: kernel 'scaled' inlined with 3 arguments: its parameter 'y' (ptr<f32>) is given a ptr<bf16>");
  EXPECT_EQ(error({x, x, {"n", ParamKind::scalar, ir::Type::scalar(ir::DType::i32)}, x}),
            "tiledist: kernel 'scaled' inlined with 4 arguments for its 3 runtime parameters");
}

TEST(Inline, AScopeOutsideATraceIsRefused) {
  try {
    dsl::ProgramScope scope({nullptr, nullptr, nullptr}, {nullptr, nullptr, nullptr});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("used outside of a kernel being traced"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tiledist
