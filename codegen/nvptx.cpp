// NVPTX: what NVIDIA GPUs give the GPU lowering (codegen/gpu_ir/). Orders and scopes of
// the memory model are spelled out in inline PTX (ld.acquire.sys, atom.add.release.gpu,
// fence.acq_rel.sys): LLVM 19's NVPTX backend emits every atomic as relaxed at GPU scope.
#include <cctype>

#include "codegen/gpu_target.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "support/support.h"

namespace tiledist::codegen {

namespace {

class NvptxTarget : public GpuTarget {
 public:
  NvptxTarget(llvm::IRBuilder<>& b, llvm::Module& m, const GpuOptions& opts) : GpuTarget(b, m), arch_(opts.arch) {}

  int warp_size() const override { return 32; }
  bool mma_sync() const override { return matrix_instr(MatrixUnit::mma_sync) != nullptr; }
  bool hopper() const override { return matrix_instr(MatrixUnit::wgmma) != nullptr; }
  const MatrixInstr* matrix_instr(MatrixUnit unit) const override { return tiledist::matrix_instr(arch_, unit); }
  /// Every NVIDIA arch we target (sm_80 on) rounds f32 to bf16 in one cvt.rn.bf16.
  bool bf16_convert() const override { return true; }
  /// e4m3 on sm_89 on: cvt.rn.satfinite.e4m3x2.f32 (rounds to nearest even, saturates overflow
  /// as the table does; of the pair, the second operand goes to the low byte). (Not e5m2:
  /// satfinite would turn its infinities into the largest finite value.)
  llvm::Value* f8_convert(llvm::Value* v, ir::DType d) override {
    if (d != ir::DType::f8e4m3 || sm_version() < 89) return nullptr;
    return b_.CreateTrunc(e4m3x2(llvm::ConstantFP::get(b_.getFloatTy(), 0.0), v), b_.getInt8Ty());
  }
  /// Two values in one cvt (a to the low byte, b to the high one).
  std::pair<llvm::Value*, llvm::Value*> f8_convert_pair(llvm::Value* a, llvm::Value* b, ir::DType d) override {
    if (d != ir::DType::f8e4m3 || sm_version() < 89) return {nullptr, nullptr};
    llvm::Value* pair = e4m3x2(b, a);
    return {b_.CreateTrunc(pair, b_.getInt8Ty()), b_.CreateTrunc(b_.CreateLShr(pair, 8), b_.getInt8Ty())};
  }

  const char* triple() const override { return "nvptx64-nvidia-cuda"; }
  void define_kernel(llvm::Function* fn, int threads, unsigned first_map, unsigned maps) override {
    llvm::LLVMContext& ctx = fn->getContext();
    fn->setCallingConv(llvm::CallingConv::PTX_Kernel);
    llvm::NamedMDNode* annotations = module_.getOrInsertNamedMetadata("nvvm.annotations");
    if (maps) {
      // Tensor maps: 128 bytes by value, 64-byte aligned, read where they are (grid constants:
      // cp.async.bulk.tensor takes the parameter's generic address, cvta.param).
      auto* map_type = llvm::ArrayType::get(b_.getInt8Ty(), 128);
      std::vector<llvm::Metadata*> indices;
      for (unsigned i = first_map; i < first_map + maps; ++i) {
        fn->addParamAttr(i, llvm::Attribute::getWithByValType(ctx, map_type));
        fn->addParamAttr(i, llvm::Attribute::getWithAlignment(ctx, llvm::Align(64)));
        indices.push_back(llvm::ValueAsMetadata::get(b_.getInt32(static_cast<int32_t>(i + 1))));  // counted from 1
      }
      annotations->addOperand(
          llvm::MDNode::get(ctx, {llvm::ValueAsMetadata::get(fn), llvm::MDString::get(ctx, "grid_constant"),
                                  llvm::MDNode::get(ctx, indices)}));
    }
    auto md = [&](const char* key, int v) {
      annotations->addOperand(llvm::MDNode::get(ctx, {llvm::ValueAsMetadata::get(fn), llvm::MDString::get(ctx, key),
                                                      llvm::ValueAsMetadata::get(b_.getInt32(v))}));
    };
    md("kernel", 1);
    md("maxntidx", threads);
  }

  llvm::Value* thread_id() override { return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x, {}, {}); }
  llvm::Value* program_id(int axis) override {
    static const llvm::Intrinsic::ID ids[] = {llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x,
                                              llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y,
                                              llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_z};
    return b_.CreateIntrinsic(ids[axis], {}, {});
  }
  llvm::Value* num_programs(int axis) override {
    static const llvm::Intrinsic::ID ids[] = {llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x,
                                              llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_y,
                                              llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_z};
    return b_.CreateIntrinsic(ids[axis], {}, {});
  }
  void barrier() override { b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {}); }

  llvm::Value* math(ir::OpCode code, llvm::Value* x) override {
    using ir::OpCode;
    if (!x->getType()->isFloatTy())
      throw Error(str_cat("tiledist: f64 math functions are not supported on ", arch_, " yet"));
    auto call = [&](llvm::Intrinsic::ID id, llvm::Value* v) { return b_.CreateIntrinsic(id, {}, {v}); };
    llvm::Value* log2e = llvm::ConstantFP::get(b_.getFloatTy(), 1.4426950408889634);
    llvm::Value* ln2 = llvm::ConstantFP::get(b_.getFloatTy(), 0.6931471805599453);
    switch (code) {
      case OpCode::Exp:
        return call(llvm::Intrinsic::nvvm_ex2_approx_f, b_.CreateFMul(x, log2e));
      case OpCode::Exp2:
        return call(llvm::Intrinsic::nvvm_ex2_approx_f, x);
      case OpCode::Log:
        return b_.CreateFMul(call(llvm::Intrinsic::nvvm_lg2_approx_f, x), ln2);
      case OpCode::Log2:
        return call(llvm::Intrinsic::nvvm_lg2_approx_f, x);
      case OpCode::Sqrt:
        return call(llvm::Intrinsic::nvvm_sqrt_rn_f, x);
      case OpCode::Rsqrt:
        return b_.CreateFDiv(llvm::ConstantFP::get(b_.getFloatTy(), 1.0), call(llvm::Intrinsic::nvvm_sqrt_rn_f, x));
      case OpCode::Sin:
        return call(llvm::Intrinsic::nvvm_sin_approx_f, x);
      case OpCode::Cos:
        return call(llvm::Intrinsic::nvvm_cos_approx_f, x);
      case OpCode::Floor:
        return call(llvm::Intrinsic::nvvm_floor_f, x);
      case OpCode::Ceil:
        return call(llvm::Intrinsic::nvvm_ceil_f, x);
      default:
        return erf(x);
    }
  }

  llvm::Value* fabs(llvm::Value* x) override { return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_fabs_f, {}, {x}); }
  llvm::Value* shuffle_xor(llvm::Value* v, int mask) override {
    auto id =
        v->getType()->isFloatTy() ? llvm::Intrinsic::nvvm_shfl_sync_bfly_f32 : llvm::Intrinsic::nvvm_shfl_sync_bfly_i32;
    return b_.CreateIntrinsic(id, {}, {b_.getInt32(-1), v, b_.getInt32(mask), b_.getInt32(31)});
  }
  llvm::Value* nanoseconds() override { return ptx(b_.getInt64Ty(), "mov.u64 $0, %globaltimer;", "=l", {}); }
  llvm::Value* processor_id() override { return ptx(b_.getInt32Ty(), "mov.u32 $0, %smid;", "=r", {}); }

  llvm::Value* load(llvm::Type* t, llvm::Value* p, ir::MemOrder order, ir::MemScope scope) override {
    return ptx(t,
               str_cat("ld.", ir::name_of(order), ".", ir::name_of(scope), ".global.b", t->getPrimitiveSizeInBits(),
                       " $0, [$1];"),
               str_cat("=", reg_constraint(t), ",l"), {global_ptr(p)});
  }
  void store(llvm::Value* p, llvm::Value* v, ir::MemOrder order, ir::MemScope scope) override {
    llvm::Type* t = v->getType();
    ptx(b_.getVoidTy(),
        str_cat("st.", ir::name_of(order), ".", ir::name_of(scope), ".global.b", t->getPrimitiveSizeInBits(),
                " [$0], $1;"),
        str_cat("l,", reg_constraint(t)), {global_ptr(p), v});
  }
  /// fence.acq_rel (or fence.sc for seq_cst) at `scope`; relaxed orders need none.
  void prefetch_l2(llvm::Value* p) override {  // (generic addressing: the pointer as the kernel holds it)
    ptx(b_.getVoidTy(), "prefetch.L2 [$0];", "l", {b_.CreatePtrToInt(p, b_.getInt64Ty())});
  }
  void fence(ir::MemOrder order, ir::MemScope scope) override {
    if (order == ir::MemOrder::relaxed) return;
    ptx(b_.getVoidTy(),
        str_cat("fence.", order == ir::MemOrder::seq_cst ? "sc" : "acq_rel", ".", ir::name_of(scope), ";"), "", {});
  }
  /// atom.<order>.<scope> (seq_cst: fence.sc, then acq_rel); an exchange whose old value nobody
  /// reads, with release or relaxed order, is a st.<order>.<scope>. Kinds PTX has no atom for
  /// at this width go through LLVM's atomic between fences.
  llvm::Value* atomic(std::optional<ir::RmwKind> kind, ir::DType d, llvm::Value* p, llvm::Value* v,
                      llvm::Value* desired, ir::MemOrder order, ir::MemScope scope_kind, bool result_used) override {
    using K = ir::RmwKind;
    using O = ir::MemOrder;
    const char* scope = ir::name_of(scope_kind);  // (PTX's scopes are named as the IR's: cta, gpu, sys)
    const std::string bits = std::to_string(8 * ir::dtype_bytes(d));
    const bool wide = ir::dtype_bytes(d) == 4 || ir::dtype_bytes(d) == 8, fl = ir::is_float(d);
    std::string type;
    if (wide && kind == K::add)
      type = (fl ? "f" : "u") + bits;
    else if (wide && !fl && (kind == K::max || kind == K::min))
      type = "s" + bits;
    else if (wide && (!kind || kind == K::xchg || kind == K::and_ || kind == K::or_ || kind == K::xor_))
      type = "b" + bits;
    llvm::Type* t = v->getType();
    if (type.empty()) {
      llvm::SyncScope::ID ssid =
          module_.getContext().getOrInsertSyncScopeID(scope_kind == ir::MemScope::cta   ? "block"
                                                      : scope_kind == ir::MemScope::gpu ? "device"
                                                                                        : "");
      if (order != O::relaxed && order != O::acquire) fence(order, scope_kind);
      llvm::Value* r = llvm_atomic(b_, kind, d, p, v, desired, ordering(order), ssid);
      if (order != O::relaxed && order != O::release) fence(order, scope_kind);
      return r;
    }
    if (order == O::seq_cst) fence(order, scope_kind);
    const char* s = ir::name_of(order == O::seq_cst ? O::acq_rel : order);
    const char* rc = reg_constraint(t);
    if (kind == K::xchg && !result_used && (order == O::release || order == O::relaxed)) {
      ptx(b_.getVoidTy(), str_cat("st.", s, ".", scope, ".global.b", bits, " [$0], $1;"), str_cat("l,", rc),
          {global_ptr(p), v});
      return llvm::UndefValue::get(t);
    }
    if (!kind)
      return ptx(t, str_cat("atom.", s, ".", scope, ".global.cas.", type, " $0, [$1], $2, $3;"),
                 str_cat("=", rc, ",l,", rc, ",", rc), {global_ptr(p), v, desired});
    const std::string name = *kind == K::xchg ? "exch" : ir::name_of(*kind);
    return ptx(t, str_cat("atom.", s, ".", scope, ".global.", name, ".", type, " $0, [$1], $2;"),
               str_cat("=", rc, ",l,", rc), {global_ptr(p), v});
  }

 private:
  /// cvt.rn.satfinite.e4m3x2.f32 of (hi, lo): an i16, lo's code in the low byte. Pure: no side
  /// effects, no memory, so LLVM moves and merges it as any arithmetic.
  llvm::Value* e4m3x2(llvm::Value* hi, llvm::Value* lo) {
    auto* ty = llvm::FunctionType::get(b_.getInt16Ty(), {b_.getFloatTy(), b_.getFloatTy()}, false);
    llvm::CallInst* pair = b_.CreateCall(
        ty, llvm::InlineAsm::get(ty, "cvt.rn.satfinite.e4m3x2.f32 $0, $1, $2;", "=h,f,f", false), {hi, lo});
    pair->setDoesNotAccessMemory();  // (an asm call without these may write memory, as far as LLVM knows)
    pair->setDoesNotThrow();
    return pair;
  }
  llvm::Value* ptx(llvm::Type* ret, const std::string& text, std::string constraints,
                   const std::vector<llvm::Value*>& args) {
    return inline_asm(b_, ret, text, std::move(constraints), args);
  }
  static const char* reg_constraint(llvm::Type* t) {
    return t->isFloatTy() ? "f" : t->isDoubleTy() ? "d" : t->getPrimitiveSizeInBits() == 64 ? "l" : "r";
  }

  /// erf(x) to ~1e-7 (Abramowitz-Stegun 7.1.26 is too coarse): erf = sign * (1 - t*exp(-x^2 + P(t))).
  llvm::Value* erf(llvm::Value* x) {
    llvm::Type* f = b_.getFloatTy();
    auto c = [&](double v) { return llvm::ConstantFP::get(f, v); };
    llvm::Value* a = fabs(x);
    llvm::Value* t = b_.CreateFDiv(c(1.0), b_.CreateFAdd(c(1.0), b_.CreateFMul(c(0.5), a)));
    // Numerical Recipes erfc: t*exp(-z^2 - 1.26551223 + t*(1.00002368 + t*(...)))
    const double k[] = {-1.26551223, 1.00002368,  0.37409196, 0.09678418,  -0.18628806,
                        0.27886807,  -1.13520398, 1.48851587, -0.82215223, 0.17087277};
    llvm::Value* p = c(k[9]);
    for (int i = 8; i >= 0; --i) p = b_.CreateFAdd(c(k[i]), b_.CreateFMul(t, p));
    llvm::Value* e = b_.CreateFSub(p, b_.CreateFMul(a, a));
    llvm::Value* erfc = b_.CreateFMul(t, math(ir::OpCode::Exp, e));
    llvm::Value* r = b_.CreateFSub(c(1.0), erfc);
    return b_.CreateSelect(b_.CreateFCmpOLT(x, c(0.0)), b_.CreateFNeg(r), r);
  }

  /// The arch's number: 90 for sm_90a.
  int sm_version() const {
    int v = 0;
    for (size_t i = arch_.find('_') + 1; i < arch_.size() && std::isdigit(static_cast<unsigned char>(arch_[i])); ++i)
      v = v * 10 + (arch_[i] - '0');
    return v;
  }
  std::string arch_;
};

std::unique_ptr<GpuTarget> make_nvptx(llvm::IRBuilder<>& b, llvm::Module& m, const GpuOptions& opts) {
  return std::make_unique<NvptxTarget>(b, m, opts);
}

}  // namespace

GpuModule lower_nvptx(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts) {
  return lower_gpu(f, ctx, opts, make_nvptx);
}

}  // namespace tiledist::codegen
