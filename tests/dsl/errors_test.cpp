// Misuse while tracing throws tiledist::Error naming the op and the user's source line;
// misuse at launch names the argument. Each test asserts the message.
#include <gtest/gtest.h>

#include "tiledist.h"

namespace tiledist {
namespace {

int g_line = 0;  // the line of the offending op, recorded by each kernel below

std::string this_file_line() { return str_cat("errors_test.cpp:", g_line, ":"); }

void expect_error(const std::function<void()>& fn, std::vector<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (auto& f : fragments) {
      if (f == "@LINE") f = this_file_line();  // known only once the kernel has been traced
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "'" << f << "' not in: " << e.what();
    }
  }
}

void expect_trace_error(const KernelDef& def, std::vector<std::string> fragments, Constants c = {}) {
  expect_error([&] { def.trace(c); }, fragments);
}

void counted(tl::Ptr<float> x, tl::Int n, tl::Int call, tl::Const<int> BLOCK) {
  auto o = tl::arange(0, BLOCK);
  tl::store(x + o, tl::load(x + o, o < n) + call.to(tl::float32), o < n);
}
TEST(Specialization, DoNotSpecializeLeavesAParameterOutOfTheFacts) {
  KernelDef def =
      KernelDef("counted", counted, {"x", "n", "call", "BLOCK"}, {{"BLOCK", 16}}).do_not_specialize({"call"});
  EXPECT_EQ(def.aligned_facts(), (ArgFacts{ArgFact::aligned16, ArgFact::aligned16, ArgFact::none}));
  expect_error([&] { def.do_not_specialize({"calls"}); }, {"kernel 'counted'", "no runtime parameter 'calls'"});
  expect_error([&] { def.do_not_specialize({"BLOCK"}); }, {"no runtime parameter 'BLOCK'"});
}

void shape_mismatch(tl::Ptr<float> x) {
  auto a = tl::arange(0, 64);
  auto b = tl::arange(0, 32);
  g_line = __LINE__ + 1;  // (the next line)
  auto c = a + b;
  tl::store(x + c, 1.0f);
}
TEST(TraceErrors, ShapeMismatchNamesOpAndLine) {
  expect_trace_error(KernelDef("shape_mismatch", shape_mismatch, {"x"}),
                     {"op 'add'", "@LINE", "incompatible shapes [64] and [32]"});
}

void dot_dtypes(tl::Ptr<tiledist::bf16> a, tl::Ptr<float> b) {
  auto r = tl::arange(0, 16);
  auto idx = tl::expand_dims(r, 1) * 16 + tl::expand_dims(r, 0);
  auto x = tl::load(a + idx);
  auto y = tl::load(b + idx);
  g_line = __LINE__ + 1;  // (the next line)
  tl::dot(x, y);
}
TEST(TraceErrors, DotDtypeMismatch) {
  expect_trace_error(KernelDef("dot_dtypes", dot_dtypes, {"a", "b"}),
                     {"op 'dot'", "@LINE", "operand dtypes differ: bf16 and f32"});
}

void dot_shapes(tl::Ptr<float> a) {
  auto x = tl::zeros({16, 8}, tl::float32);
  g_line = __LINE__ + 1;  // (the next line)
  tl::dot(x, x);
}
TEST(TraceErrors, DotInnerDimensionMismatch) {
  expect_trace_error(KernelDef("dot_shapes", dot_shapes, {"a"}), {"op 'dot'", "@LINE", "inner dimensions differ"});
}

void load_number(tl::Int n) {
  g_line = __LINE__ + 1;  // (the next line)
  tl::load(n);
}
TEST(TraceErrors, LoadFromANumber) {
  expect_trace_error(KernelDef("load_number", load_number, {"n"}),
                     {"op 'load'", "@LINE", "expected a pointer, got i32"});
}

void bad_mask(tl::Ptr<float> x) {
  auto offs = tl::arange(0, 16);
  g_line = __LINE__ + 1;  // (the next line)
  tl::load(x + offs, offs);
}
TEST(TraceErrors, MaskMustBeBoolean) {
  expect_trace_error(KernelDef("bad_mask", bad_mask, {"x"}), {"op 'load'", "@LINE", "mask must be a boolean"});
}

void store_shape(tl::Ptr<float> x) {
  auto offs = tl::arange(0, 16);
  g_line = __LINE__ + 1;  // (the next line)
  tl::store(x + offs, tl::zeros({32}, tl::float32));
}
TEST(TraceErrors, StoreValueOfAnotherShape) {
  expect_trace_error(KernelDef("store_shape", store_shape, {"x"}),
                     {"op 'store'", "@LINE", "cannot broadcast shape [32] to [16]"});
}

void zero_hint(tl::Ptr<float> x) {
  auto offs = tl::arange(0, 16);
  g_line = __LINE__ + 1;  // (the next line)
  tl::store(x + tl::max_contiguous(offs, 0), 1.0f);
}
TEST(TraceErrors, AHintNamesAPositiveNumber) {
  expect_trace_error(KernelDef("zero_hint", zero_hint, {"x"}),
                     {"op 'max_contiguous'", "@LINE", "needs a positive number, got 0"});
}

void carried_type(tl::Ptr<float> x) {
  g_line = __LINE__ + 1;  // (the next line)
  tl::for_range(0, 4, 1, tl::zeros({8}, tl::float32),
                [](tl::Tensor, tl::Tensor acc) { return tl::zeros({16}, tl::float32); });
}
TEST(TraceErrors, LoopCarriedValueChangesShape) {
  expect_trace_error(KernelDef("carried_type", carried_type, {"x"}),
                     {"op 'for_range'", "@LINE", "carried value 0 has type tensor<8xf32> on entry but tensor<16xf32>"});
}

void stages_out_of_range(tl::Ptr<float> x) {
  tl::LoopHints hints;
  hints.num_stages = 17;
  g_line = __LINE__ + 1;  // (the next line)
  tl::for_range(0, 4, 1, [&](tl::Tensor i) { tl::store(x + i, 1.0f); }, hints);
}
TEST(TraceErrors, LoopStagesOutOfRange) {
  expect_trace_error(KernelDef("stages_out_of_range", stages_out_of_range, {"x"}),
                     {"op 'for_range'", "@LINE", "num_stages = 17 (0: the compile's choice, else 1 to 16)"});
}

void tensor_condition(tl::Ptr<float> x) {
  auto c = tl::arange(0, 8) < 4;
  g_line = __LINE__ + 1;  // (the next line)
  tl::if_then(c, [] {});
}
TEST(TraceErrors, BranchOnATensor) {
  expect_trace_error(KernelDef("tensor_condition", tensor_condition, {"x"}),
                     {"op 'if_then_else'", "@LINE", "use tl::where for tensors"});
}

void bad_reshape(tl::Ptr<float> x) {
  g_line = __LINE__ + 1;  // (the next line)
  tl::reshape(tl::arange(0, 16), {3, 5});
}
TEST(TraceErrors, ReshapeChangesElementCount) {
  expect_trace_error(KernelDef("bad_reshape", bad_reshape, {"x"}), {"op 'reshape'", "@LINE", "16 elements vs 15"});
}

void bad_arange(tl::Ptr<float> x, tl::Const<int> B) {
  g_line = __LINE__ + 1;  // (the next line)
  tl::arange(0, B);
}
TEST(TraceErrors, ArangeNeedsPowerOfTwo) {
  expect_trace_error(KernelDef("bad_arange", bad_arange, {"x", "B"}), {"op 'arange'", "@LINE", "power-of-2"},
                     {{"B", 100}});
}

void math_on_int(tl::Ptr<float> x) {
  g_line = __LINE__ + 1;  // (the next line)
  tl::exp(tl::arange(0, 8));
}
TEST(TraceErrors, MathNeedsFloats) {
  expect_trace_error(KernelDef("math_on_int", math_on_int, {"x"}), {"op 'exp'", "@LINE", "floating-point"});
}

void pointer_times(tl::Ptr<float> x) {
  g_line = __LINE__ + 1;  // (the next line)
  (void)(x * 2);
}
TEST(TraceErrors, ArithmeticOnPointers) {
  expect_trace_error(KernelDef("pointer_times", pointer_times, {"x"}), {"op 'mul'", "@LINE", "pointer"});
}

TEST(TraceErrors, ConstantsMustBeKnownAndGiven) {
  KernelDef def("bad_arange", bad_arange, {"x", "B"});
  expect_trace_error(def, {"kernel 'bad_arange' needs a value for constant 'B'"});
  expect_trace_error(def, {"kernel 'bad_arange' has no constant 'C' (its constants: B)"}, {{"B", 8}, {"C", 1}});
}

TEST(TraceErrors, NamesMustMatchParameters) {
  expect_error([] { KernelDef("bad_arange", bad_arange, {"x"}); }, {"has 2 parameters but 1 names"});
  // A default for a misspelled constant (or for a runtime parameter) would be dropped unseen.
  expect_error([] { KernelDef("bad_arange", bad_arange, {"x", "B"}, {{"BLOCK", 8}}); },
               {"kernel 'bad_arange': a default for 'BLOCK', which is not one of its constants (B)"});
  expect_error([] { KernelDef("bad_arange", bad_arange, {"x", "B"}, {{"x", 8}}); }, {"a default for 'x'"});
}

void empty_operand(tl::Ptr<float> x) {
  tl::Tensor never_set;
  tl::store(x, tl::sum(never_set, 0));
}
TEST(TraceErrors, AnEmptyTensorIsAnErrorNotACrash) {
  expect_trace_error(KernelDef("empty_operand", empty_operand, {"x"}), {"an empty tl::Tensor"});
  Kernel empty;
  expect_error([&] { (void)empty.name(); }, {"name() of an empty Kernel"});
  expect_error([&] { (void)empty.ir(); }, {"ir() of an empty Kernel"});
  expect_error([&] { empty.launch({1}); }, {"launch of an empty Kernel"});
}

TEST(TraceErrors, OpsOutsideTracing) {
  expect_error([] { tl::arange(0, 8); }, {"tl::arange used outside of a kernel being traced"});
}

void copy(tl::Ptr<float> x, tl::Ptr<float> y, tl::Int n) {
  auto offs = tl::arange(0, 16);
  tl::store(y + offs, tl::load(x + offs, offs < n), offs < n);
}
TEST(LaunchErrors, ArgumentsAreChecked) {
  auto k = compile(KernelDef("copy", copy, {"x", "y", "n"}));
  std::vector<float> x(16), y(16);
  std::vector<double> d(16);
  expect_error([&] { k.launch({1}, x, y); }, {"kernel 'copy' takes 3 arguments (x, y, n), got 2"});
  expect_error([&] { k.launch({1}, x, d, 16); },
               {"argument 1 ('y')", "expected a pointer to f32, got a pointer to f64"});
  expect_error([&] { k.launch({1}, x, y, 1.5); }, {"argument 2 ('n')", "expected an integer (i32)"});
  expect_error([&] { k.launch({1}, x, 3, 16); }, {"argument 1 ('y')", "got a number"});
  expect_error([&] { k.launch({1}, x, y, int64_t(1) << 40); }, {"does not fit in i32"});
  expect_error([&] { k.launch({0}, x, y, 16); }, {"grid dimension 0 is out of range"});
}

}  // namespace
}  // namespace tiledist
