// The IR: printing and parsing round-trip over every op; the verifier rejects ill-typed IR
// naming the op and its location.
#include <gtest/gtest.h>

#include <set>

#include "ir/builder.h"
#include "ir/printer.h"
#include "kernels/kernels.h"

namespace tiledist::ir {
namespace {

// Every op of ops.def, with every type form (pointers, tensors of pointers, narrow floats).
const char* kAllOps = R"(
func @all_ops(%p: ptr<f32>, %q: ptr<i32, symmetric>, %n: i32, %h: bf16, %e: f8e4m3) {
  %0 = constant {value = 3} : i32
  %1 = constant {value = 2.5} : f32
  %2 = program_id {axis = 0} : i32
  %3 = num_programs {axis = 2} : i32
  %4 = arange {end = 16, start = 0} : tensor<16xi32>
  %5 = splat %1 : tensor<16xf32>
  %6 = expand_dims %4 {axis = 1} : tensor<16x1xi32>
  %7 = broadcast %6 : tensor<16x8xi32>
  %8 = reshape %7 : tensor<8x16xi32>
  %9 = trans %8 {perm = [1, 0]} : tensor<16x8xi32>
  %10 = add %0, %n : i32
  %11 = sub %10, %2 : i32
  %12 = mul %11, %3 : i32
  %13 = div %12, %0 : i32
  %14 = rem %13, %0 : i32
  %15 = min %14, %n : i32
  %16 = max %15, %n : i32
  %17 = and %16, %0 : i32
  %18 = or %17, %0 : i32
  %19 = xor %18, %0 : i32
  %20 = shl %19, %0 : i32
  %21 = shr %20, %0 : i32
  %22 = cmp %21, %n {pred = "le"} : i1
  %23 = neg %21 : i32
  %24 = not %22 : i1
  %25 = exp %5 : tensor<16xf32>
  %26 = exp2 %25 : tensor<16xf32>
  %27 = log %26 : tensor<16xf32>
  %28 = log2 %27 : tensor<16xf32>
  %29 = sqrt %28 : tensor<16xf32>
  %30 = rsqrt %29 : tensor<16xf32>
  %31 = abs %30 : tensor<16xf32>
  %32 = erf %31 : tensor<16xf32>
  %33 = sin %32 : tensor<16xf32>
  %34 = cos %33 : tensor<16xf32>
  %35 = floor %34 : tensor<16xf32>
  %36 = ceil %35 : tensor<16xf32>
  %37 = cast %h : f32
  %38 = cast %e : bf16
  %39 = bitcast %1 : i32
  %40 = select %22, %10, %23 : i32
  %41 = hint %4 {max_contiguous = 16, multiple_of = 16} : tensor<16xi32>
  %42 = splat %p : tensor<16xptr<f32>>
  %43 = addptr %42, %41 : tensor<16xptr<f32>>
  %44 = splat %22 : tensor<16xi1>
  %45 = load %43, %44, %36 : tensor<16xf32>
  store %43, %45, %44
  prefetch %43, %44
  prefetch %p
  %46 = atomic_rmw %q, %0 {kind = "add", order = "acq_rel", scope = "sys"} : i32
  %47 = atomic_cas %q, %0, %46 {order = "relaxed", scope = "gpu"} : i32
  %48 = reduce %9 {axis = 1, kind = "argmax"} : tensor<16xi32>
  %49 = reduce %45 {axis = 0, kind = "sum"} : f32
  %50 = splat %1 : tensor<16x8xf32>
  %51 = splat %1 : tensor<8x8xf32>
  %52 = dot %50, %51, %50 : tensor<16x8xf32>
  %53, %54 = for %0, %n, %0, %49, %52 : f32, tensor<16x8xf32> {
  ^(%55: i32, %56: f32, %57: tensor<16x8xf32>):
    %58 = add %56, %1 : f32
    yield %58, %57
  }
  %59 = if %24 : f32 {
  ^():
    yield %53
  } {
  ^():
    yield %1
  }
  %60 = while %n : i32 {
  ^(%61: i32):
    %62 = cmp %61, %0 {pred = "gt"} : i1
    condition %62, %61
  } {
  ^(%63: i32):
    %64 = sub %63, %0 : i32
    yield %64
  }
  %65 = rank : i32
  %66 = num_ranks : i32
  %67 = symm_at %q, %65 : ptr<i32, symmetric>
  %68 = wait %67, %66, %0 {cmp = "eq", order = "acquire", scope = "sys"} : i32
  %69 = consume_token %p, %68 : ptr<f32>
  memcpy %69, %p, %n {granularity = "block", nbi = 1}
  fence {order = "release", scope = "sys"}
  barrier {kind = "barrier_all"}
  profile {phase = "begin", region = "tile"}
  profile %2, %n {phase = "instant", region = "mark"}
  profile {phase = "end", region = "tile"}
  store %69, %59
  %70 = splat %1 : tensor<64x64xf32, #blocked<spt = [1, 4], tpw = [2, 16], wpc = [4, 1], order = [1, 0]>>
  %71 = convert_layout %70 : tensor<64x64xf32, #mma<mma_sync, wpc = [4, 1], instr = [16, 8]>>
  %72 = local_alloc : memdesc<2x64x64xbf16, #shared<vec = 8, per_phase = 1, max_phase = 8, order = [1, 0]>>
  %73 = splat %p : tensor<64x64xptr<f32>, #blocked<spt = [1, 4], tpw = [2, 16], wpc = [4, 1], order = [1, 0]>>
  %74 = bitcast %73 : tensor<64x64xptr<bf16>, #blocked<spt = [1, 4], tpw = [2, 16], wpc = [4, 1], order = [1, 0]>>
  %75 = splat %22 : tensor<64x64xi1, #blocked<spt = [1, 4], tpw = [2, 16], wpc = [4, 1], order = [1, 0]>>
  %76 = splat %h : tensor<64x64xbf16, #blocked<spt = [1, 4], tpw = [2, 16], wpc = [4, 1], order = [1, 0]>>
  async_copy %72, %0, %74, %75, %76 {via = "cp.async"}
  async_commit
  async_wait {pending = 0}
  %77 = local_load %72, %0 {perm = [1, 0]} : tensor<64x64xbf16, #dot_op<b, #mma<mma_sync, wpc = [4, 1], instr = [16, 8]>, k_width = 2>>
  %78 = local_alloc : memdesc<2x1x1xi64, #shared<vec = 1, per_phase = 1, max_phase = 1, order = [1, 0]>>
  init_barrier %78 {count = 2}
  async_tma_copy %72, %0, %78, %22, %0, %0 {tensor = "0 bf16 p3,2147483647 p3 64,64"}
  wait_barrier %78, %0, %0, %22 {issuer = 1}
  arrive_barrier %78, %0
  warp_specialize {consumer_regs = 232, producer_regs = 40} {
  ^():
    wait_barrier %78, %0, %0 {issuer = 1}
    yield
  } {
  ^():
    arrive_barrier %78, %0, %22 {pending = 1}
    yield
  }
  return
}
)";

TEST(IR, RoundTripCoversEveryOp) {
  auto f = parse_function(kAllOps, "all_ops");
  std::string once = print(*f);
  std::string twice = print(*parse_function(once, "printed"));
  EXPECT_EQ(once, twice);
  // Every op of the table appears in the printed function.
  std::set<std::string> seen;
  f->walk([&](const Op& op) { seen.insert(op.name()); });
  for (int i = 0; i <= static_cast<int>(OpCode::Return); ++i)
    EXPECT_TRUE(seen.count(op_name(static_cast<OpCode>(i)))) << "no test of op " << op_name(static_cast<OpCode>(i));
}

TEST(IR, RoundTripKeepsLocations) {
  auto f = parse_function(kAllOps, "all_ops");
  f->walk([&](Op& op) { op.loc = {"kernel.cpp", 10 + static_cast<int>(op.results.size()), 4}; });
  std::string once = print(*f, {true});
  EXPECT_NE(once.find("loc(\"kernel.cpp\":11:4)"), std::string::npos);
  EXPECT_EQ(once, print(*parse_function(once, "printed"), {true}));
}

TEST(IR, RoundTripEveryLibraryKernel) {
  for (const std::string& name : Registry::global().names()) {
    const KernelDef* def = Registry::global().find(name);
    auto f = def->trace({});
    std::string once = print(*f, {true});
    EXPECT_EQ(once, print(*parse_function(once, name), {true})) << name;
  }
}

TEST(IR, AttributesRoundTripExactly) {
  const char* text = R"(func @c(%p: ptr<f64>) {
  %0 = constant {value = 0.10000000000000001} : f64
  %1 = constant {value = -1e-300} : f64
  %2 = constant {value = inf} : f64
  %3 = add %0, %1 : f64
  %4 = add %3, %2 : f64
  store %p, %4
  return
}
)";
  auto f = parse_function(text);
  EXPECT_EQ(print(*f), text);
}

void expect_rejected(const std::string& text, const std::string& fragment) {
  try {
    parse_function(text, "bad.tir");
    ADD_FAILURE() << "accepted:\n" << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Verifier, RejectsMismatchedOperandsNamingOpAndLocation) {
  expect_rejected(R"(func @f(%a: i32, %b: f32) {
  %0 = add %a, %b : i32 loc("user.cpp":42:7)
  return
})",
                  "op 'add' at user.cpp:42: operand types differ: i32 and f32");
}

TEST(Verifier, RejectsBadShapesAndTypes) {
  expect_rejected("func @f(%p: ptr<f32>) {\n %0 = load %p : i32\n return\n}", "op 'load'");
  expect_rejected("func @f(%a: i32) {\n %0 = splat %a : tensor<4xf32>\n return\n}", "op 'splat'");
  expect_rejected("func @f() {\n %0 = arange {end = 12, start = 0} : tensor<12xi32>\n return\n}", "power-of-2");
  expect_rejected(
      "func @f(%a: f32) {\n %0 = splat %a : tensor<4x8xf32>\n %1 = splat %a : tensor<4x8xf32>\n"
      " %2 = dot %0, %1, %0 : tensor<4x8xf32>\n return\n}",
      "shapes do not chain");
  expect_rejected("func @f(%a: f32) {\n %0 = exp %a : f32\n %1 = reshape %a : tensor<3xf32>\n return\n}",
                  "op 'reshape'");
  expect_rejected("func @f(%a: i32) {\n %0 = cmp %a, %a {pred = \"lte\"} : i1\n return\n}",
                  "attribute pred = \"lte\" is not one of eq, ne, lt, le, gt, ge");
  expect_rejected("func @f(%a: f32) {\n %0 = bitcast %a : i64\n return\n}", "bit width");
  expect_rejected("func @f(%a: i32) {\n %0 = bitcast %a : ptr<f32>\n return\n}", "must be i64");
  expect_rejected("func @f(%p: ptr<f32>) {\n %0 = bitcast %p : i64\n return\n}", "cannot turn a pointer");
  // (a wait on a block of pointers compares each with the value beside it: a block of its shape)
  const std::string block_wait =
      "func @f(%p: ptr<i64>, %v: i64) {\n %0 = splat %p : tensor<4xptr<i64>>\n %1 = constant {value = 1} : i32\n"
      " %2 = splat %v : tensor<4xi64>\n %3 = splat %v : tensor<8xi64>\n";
  auto wait = [](const char* value) {
    return str_cat(" %4 = wait %0, %1, ", value,
                   " {cmp = \"ge\", order = \"acquire\", scope = \"gpu\"} : i64\n return\n}");
  };
  expect_rejected(block_wait + wait("%v"), "the expected value must be tensor<4xi64>, got i64");
  expect_rejected(block_wait + wait("%3"), "the expected value must be tensor<4xi64>, got tensor<8xi64>");
  EXPECT_NO_THROW(parse_function(block_wait + wait("%2"), "good.tir"));
}

TEST(Verifier, RejectsStructuralErrors) {
  expect_rejected("func @f(%a: i32) {\n %0 = add %a, %1 : i32\n %1 = add %a, %a : i32\n return\n}", "undefined value");
  expect_rejected("func @f(%a: i32) {\n %0 = add %a, %a : i32\n}", "must end with 'return'");
  expect_rejected(R"(func @f(%a: i32) {
  %0 = for %a, %a, %a, %a : i32 {
  ^(%1: i32, %2: f32):
    yield %2
  }
  return
})",
                  "op 'for'");
  expect_rejected("func @f(%a: i32) {\n %0 = frobnicate %a : i32\n return\n}", "unknown op 'frobnicate'");
  expect_rejected("func @f(%a: i32) {\n %0 = add %a, %a : tensor<4x\n return\n}", "bad.tir:3:8: parse error");
}

TEST(Verifier, MalformedAttributesAreErrorsNotCrashes) {
  expect_rejected(
      "func @f(%a: f32) {\n %0 = splat %a : tensor<4xf32>\n %1 = expand_dims %0 : tensor<1x4xf32>\n return\n}",
      "needs an integer axis");
  expect_rejected(
      "func @f(%a: f32) {\n %0 = splat %a : tensor<4xf32>\n %1 = reduce %0 {axis = 0.0, kind = \"sum\"} : f32\n "
      "return\n}",
      "needs an integer axis");
  expect_rejected("func @f(%a: f32) {\n %0 = reshape %a : tensor<1xf32>\n return\n}", "needs a tensor");
  expect_rejected("func @f(%a: f32) {\n %0 = trans %a {perm = []} : f32\n return\n}", "needs a tensor");
  expect_rejected("func @f() {\n %0 = constant {value = 300} : i8\n return\n}", "does not fit in i8");
}

TEST(IR, StringsWithQuotesRoundTrip) {
  auto f = parse_function(kAllOps, "all_ops");
  f->walk([&](Op& op) { op.loc = {"dir \"x\"\\y.cpp", 3, 1}; });
  std::string once = print(*f, {true});
  auto again = parse_function(once, "printed");
  EXPECT_EQ(once, print(*again, {true}));
  EXPECT_EQ(again->body.ops.front()->loc.file, "dir \"x\"\\y.cpp");
}

TEST(Verifier, ValuesDoNotEscapeTheirRegion) {
  expect_rejected(R"(func @f(%a: i32) {
  for %a, %a, %a {
  ^(%1: i32):
    %2 = add %1, %1 : i32
    yield
  }
  %3 = add %2, %2 : i32
  return
})",
                  "undefined value %2");
}

TEST(Builder, ChecksEachOpAsItIsBuilt) {
  Function f;
  f.name = "f";
  Builder b(&f.body);
  b.set_loc({"k.cpp", 7, 1});
  Value* x = f.body.add_arg(Type::scalar(DType::i32), "x");
  Value* y = f.body.add_arg(Type::scalar(DType::f32), "y");
  try {
    b.binary(OpCode::Mul, x, y);
    FAIL() << "ill-typed op built";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("op 'mul' at k.cpp:7"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tiledist::ir
