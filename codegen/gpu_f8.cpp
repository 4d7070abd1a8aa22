// The f8 formats' conversions on GPU targets (codegen/gpu_target.h), by tables of their codes'
// values: what the GPU lowering's registers (f32) and memory bits (i8) of f8 values go through.
#include "codegen/gpu_target.h"
#include "ir/numeric.h"

namespace tiledist::codegen {

using ir::DType;

namespace {

int max_finite_code(DType d) { return d == DType::f8e4m3 ? 0x7E : 0x7B; }

/// The values of an f8 format: all 256 codes (for decoding), or the non-negative finite ones in
/// ascending order (for rounding), as constant arrays of the module.
llvm::GlobalVariable* f8_table(llvm::IRBuilder<>& b_, llvm::Module& module_, DType d, bool positive_only) {
  std::string name = str_cat("tiledist_", ir::dtype_name(d), positive_only ? "_finite" : "_values");
  if (auto* g = module_.getGlobalVariable(name, true)) return g;
  std::vector<llvm::Constant*> values;
  int count = positive_only ? max_finite_code(d) + 1 : 256;
  for (int c = 0; c < count; ++c) {
    float v = d == DType::f8e4m3 ? f8e4m3_bits_to_float(static_cast<uint8_t>(c))
                                 : f8e5m2_bits_to_float(static_cast<uint8_t>(c));
    values.push_back(llvm::ConstantFP::get(b_.getFloatTy(), v));
  }
  auto* ty = llvm::ArrayType::get(b_.getFloatTy(), values.size());
  return new llvm::GlobalVariable(module_, ty, true, llvm::GlobalValue::InternalLinkage,
                                  llvm::ConstantArray::get(ty, values), name);
}

}  // namespace

llvm::Value* GpuTarget::f8_from_bits(llvm::Value* bits, DType d) {
  llvm::GlobalVariable* t = f8_table(b_, module_, d, false);
  return b_.CreateLoad(b_.getFloatTy(),
                       b_.CreateGEP(t->getValueType(), t, {b_.getInt32(0), b_.CreateZExt(bits, b_.getInt32Ty())}));
}

llvm::Value* GpuTarget::f8_to_bits(llvm::Value* v, DType d) {
  if (auto* c = llvm::dyn_cast<llvm::ConstantFP>(v)) {  // (a constant's bits now: the target's fabs may not fold)
    const float f = c->getValueAPF().convertToFloat();
    return b_.getInt8(d == DType::f8e4m3 ? float_to_f8e4m3_bits(f) : float_to_f8e5m2_bits(f));
  }
  if (llvm::Value* native = f8_convert(v, d)) return native;
  llvm::GlobalVariable* t = f8_table(b_, module_, d, true);
  int max_code = max_finite_code(d);
  auto value_at = [&](llvm::Value* code) {
    return b_.CreateLoad(b_.getFloatTy(), b_.CreateGEP(t->getValueType(), t, {b_.getInt32(0), code}));
  };
  llvm::Value* a = fabs(v);
  llvm::Value* lo = b_.getInt32(0);
  for (int step = 64; step >= 1; step /= 2) {
    llvm::Value* probe = b_.CreateAdd(lo, b_.getInt32(step));
    llvm::Value* in_range = b_.CreateICmpSLE(probe, b_.getInt32(max_code));
    llvm::Value* safe = b_.CreateSelect(in_range, probe, b_.getInt32(0));
    llvm::Value* take = b_.CreateAnd(in_range, b_.CreateFCmpOLE(value_at(safe), a));
    lo = b_.CreateSelect(take, probe, lo);
  }
  llvm::Value* hi = b_.CreateSelect(b_.CreateICmpSLT(lo, b_.getInt32(max_code)), b_.CreateAdd(lo, b_.getInt32(1)), lo);
  llvm::Value* below = b_.CreateFSub(a, value_at(lo));
  llvm::Value* above = b_.CreateFSub(value_at(hi), a);
  llvm::Value* lo_even = b_.CreateICmpEQ(b_.CreateAnd(lo, b_.getInt32(1)), b_.getInt32(0));
  llvm::Value* pick_hi =
      b_.CreateOr(b_.CreateFCmpOLT(above, below), b_.CreateAnd(b_.CreateFCmpOEQ(above, below), b_.CreateNot(lo_even)));
  llvm::Value* code = b_.CreateSelect(b_.CreateAnd(pick_hi, b_.CreateICmpNE(hi, lo)), hi, lo);
  if (d == DType::f8e5m2) {  // e5m2 has infinities
    llvm::Value* inf = b_.CreateFCmpOEQ(a, llvm::ConstantFP::getInfinity(b_.getFloatTy()));
    code = b_.CreateSelect(inf, b_.getInt32(0x7C), code);
  }
  llvm::Value* nan = b_.CreateFCmpUNO(v, v);
  code = b_.CreateSelect(nan, b_.getInt32(d == DType::f8e4m3 ? 0x7F : 0x7E), code);
  llvm::Value* sign = b_.CreateLShr(b_.CreateBitCast(v, b_.getInt32Ty()), 24);
  code = b_.CreateOr(code, b_.CreateAnd(sign, b_.getInt32(0x80)));
  return b_.CreateTrunc(code, b_.getInt8Ty());
}

}  // namespace tiledist::codegen
