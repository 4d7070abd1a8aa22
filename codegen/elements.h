// Per-element semantics shared by every target's lowering: register and memory types of each
// dtype, narrow-float rounding, arithmetic, comparisons and casts on one element. A target
// supplies its math functions and f8 conversions.
#pragma once

#include <functional>
#include <string>

#include "ir/attrs.h"
#include "ir/ir.h"
#include "ir/numeric.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

namespace tiledist::codegen {

/// The LLVM ordering of a memory order a kernel named.
inline llvm::AtomicOrdering ordering(ir::MemOrder order) {
  switch (order) {
    case ir::MemOrder::relaxed:
      return llvm::AtomicOrdering::Monotonic;
    case ir::MemOrder::seq_cst:
      return llvm::AtomicOrdering::SequentiallyConsistent;
    case ir::MemOrder::acquire:
      return llvm::AtomicOrdering::Acquire;
    case ir::MemOrder::release:
      return llvm::AtomicOrdering::Release;
    case ir::MemOrder::acq_rel:
      break;
  }
  return llvm::AtomicOrdering::AcquireRelease;
}

/// An atomic op's read-modify-write kind (atomic_rmw), or none (atomic_cas: compare-and-swap).
inline std::optional<ir::RmwKind> atomic_kind(const ir::Op& op) {
  if (op.code == ir::OpCode::AtomicCAS) return std::nullopt;
  return ir::enum_attr<ir::RmwKind>(op, "kind");
}

/// LLVM's atomic instruction on *p: a read-modify-write of `kind` (v the operand), or where
/// `kind` is none a compare-and-swap (v the expected value, `desired` the new one), on a value
/// of dtype `d`; returns the old value.
inline llvm::Value* llvm_atomic(llvm::IRBuilder<>& b, std::optional<ir::RmwKind> kind, ir::DType d, llvm::Value* p,
                                llvm::Value* v, llvm::Value* desired, llvm::AtomicOrdering order,
                                llvm::SyncScope::ID scope) {
  llvm::MaybeAlign align(ir::dtype_bytes(d));
  if (!kind) {
    llvm::AtomicOrdering failure = order == llvm::AtomicOrdering::Release          ? llvm::AtomicOrdering::Monotonic
                                   : order == llvm::AtomicOrdering::AcquireRelease ? llvm::AtomicOrdering::Acquire
                                                                                   : order;
    return b.CreateExtractValue(b.CreateAtomicCmpXchg(p, v, desired, align, order, failure, scope), 0);
  }
  bool fl = ir::is_float(d);
  using B = llvm::AtomicRMWInst::BinOp;
  B bop = B::Xor;
  switch (*kind) {
    case ir::RmwKind::add:
      bop = fl ? B::FAdd : B::Add;
      break;
    case ir::RmwKind::max:
      bop = fl ? B::FMax : B::Max;
      break;
    case ir::RmwKind::min:
      bop = fl ? B::FMin : B::Min;
      break;
    case ir::RmwKind::xchg:
      bop = B::Xchg;
      break;
    case ir::RmwKind::and_:
      bop = B::And;
      break;
    case ir::RmwKind::or_:
      bop = B::Or;
      break;
    case ir::RmwKind::xor_:
      bop = B::Xor;
      break;
  }
  return b.CreateAtomicRMW(bop, p, v, align, order, scope);
}

class Elements {
 public:
  Elements(llvm::LLVMContext& ctx, llvm::Module& module) : b_(ctx), elem_module_(module) {}
  virtual ~Elements() = default;

 protected:
  using DType = ir::DType;
  using OpCode = ir::OpCode;

  /// exp, exp2, log, log2, sqrt, rsqrt, erf, sin, cos, floor, ceil of an f32 or f64 value.
  virtual llvm::Value* math(OpCode code, llvm::Value* x) = 0;
  /// f32 <-> f8 bits.
  virtual llvm::Value* f8_to_bits(llvm::Value* v, DType d) = 0;
  virtual llvm::Value* f8_from_bits(llvm::Value* bits, DType d) = 0;
  /// f32 -> bf16 bits, rounded to nearest even, NaN staying NaN: on the bits, unless the target
  /// has an instruction for it.
  virtual llvm::Value* bf16_bits(llvm::Value* v) {
    llvm::Value* u = b_.CreateBitCast(v, b_.getInt32Ty());
    llvm::Value* lsb = b_.CreateAnd(b_.CreateLShr(u, 16), 1);
    llvm::Value* rounded = b_.CreateLShr(b_.CreateAdd(u, b_.CreateAdd(lsb, b_.getInt32(0x7FFF))), 16);
    llvm::Value* nan = b_.CreateOr(b_.CreateLShr(u, 16), b_.getInt32(0x40));  // (a quiet NaN)
    llvm::Value* is_nan = b_.CreateFCmpUNO(v, v);
    return b_.CreateTrunc(b_.CreateSelect(is_nan, nan, rounded), b_.getInt16Ty());
  }

  /// The lowered module must be valid LLVM IR; anything else is a bug in the lowering.
  void verify_lowered(const char* backend) {
    std::string err;
    llvm::raw_string_ostream os(err);
    if (llvm::verifyModule(elem_module_, &os))
      TD_ASSERT(false, "invalid LLVM IR from the ", backend, " lowering: ", os.str());
  }

  llvm::FunctionCallee helper(const char* name, llvm::Type* ret, std::vector<llvm::Type*> params) {
    return elem_module_.getOrInsertFunction(name, llvm::FunctionType::get(ret, params, false));
  }

  // ---- types
  llvm::Type* reg_type(const ir::Type& t) {
    if (t.is_ptr) return b_.getPtrTy();
    switch (t.dtype) {
      case DType::i1:
        return b_.getInt1Ty();
      case DType::i8:
        return b_.getInt8Ty();
      case DType::i16:
        return b_.getInt16Ty();
      case DType::i32:
        return b_.getInt32Ty();
      case DType::i64:
        return b_.getInt64Ty();
      case DType::f64:
        return b_.getDoubleTy();
      default:
        return b_.getFloatTy();  // f32 and the narrow floats
    }
  }
  /// Element type of a tensor in scratch (booleans take a byte).
  llvm::Type* buf_type(const ir::Type& t) { return !t.is_ptr && t.dtype == DType::i1 ? b_.getInt8Ty() : reg_type(t); }
  /// Element type in global memory.
  llvm::Type* mem_type(DType d) {
    switch (d) {
      case DType::i1:
      case DType::i8:
      case DType::f8e4m3:
      case DType::f8e5m2:
        return b_.getInt8Ty();
      case DType::i16:
      case DType::bf16:
        return b_.getInt16Ty();
      case DType::f16:
        return b_.getHalfTy();
      default:
        return reg_type(ir::Type::scalar(d));
    }
  }
  bool narrow(DType d) { return d == DType::f16 || d == DType::bf16 || d == DType::f8e4m3 || d == DType::f8e5m2; }

  // ---- conversions between registers and memory
  llvm::Value* to_mem(llvm::Value* v, DType d) {
    switch (d) {
      case DType::i1:
        return b_.CreateZExt(v, b_.getInt8Ty());
      case DType::f16:
        return b_.CreateFPTrunc(v, b_.getHalfTy());
      case DType::bf16:
        return bf16_bits(v);
      case DType::f8e4m3:
      case DType::f8e5m2:
        return f8_to_bits(v, d);
      default:
        return v;
    }
  }
  llvm::Value* from_mem(llvm::Value* v, DType d) {
    switch (d) {
      case DType::i1:
        return b_.CreateICmpNE(v, b_.getInt8(0));
      case DType::f16:
        return b_.CreateFPExt(v, b_.getFloatTy());
      case DType::bf16:
        return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(v, b_.getInt32Ty()), 16), b_.getFloatTy());
      case DType::f8e4m3:
      case DType::f8e5m2:
        return f8_from_bits(v, d);
      default:
        return v;
    }
  }
  /// Rounds an f32 register to a narrow format's precision.
  llvm::Value* round(llvm::Value* v, DType d) { return narrow(d) ? from_mem(to_mem(v, d), d) : v; }

  /// A constant op's value as a register holds it (a narrow float rounded to its format).
  llvm::Value* constant_of(const ir::Op& op) {
    const ir::Type& rt = op.results[0]->type;
    const ir::Attr& a = op.attrs.at("value");
    if (rt.is_float()) {
      double d = std::holds_alternative<double>(a) ? std::get<double>(a) : double(std::get<int64_t>(a));
      if (narrow(rt.dtype)) d = round_to_dtype(static_cast<float>(d), rt.dtype);
      return llvm::ConstantFP::get(reg_type(rt.element()), d);
    }
    return llvm::ConstantInt::get(reg_type(rt.element()), static_cast<uint64_t>(std::get<int64_t>(a)), true);
  }

  // ---- elementwise semantics (shared by scalars and tensors)
  llvm::Value* elementwise(const ir::Op& op, const std::vector<llvm::Value*>& in) {
    const ir::Type& rt = op.results[0]->type;
    const ir::Type& at = op.operands[0]->type;
    bool fl = at.is_float();
    DType d = rt.dtype;
    switch (op.code) {
      case OpCode::Add:
        return fl ? round(b_.CreateFAdd(in[0], in[1]), d) : b_.CreateAdd(in[0], in[1]);
      case OpCode::Sub:
        return fl ? round(b_.CreateFSub(in[0], in[1]), d) : b_.CreateSub(in[0], in[1]);
      case OpCode::Mul:
        return fl ? round(b_.CreateFMul(in[0], in[1]), d) : b_.CreateMul(in[0], in[1]);
      case OpCode::Div:
        return fl ? round(b_.CreateFDiv(in[0], in[1]), d) : b_.CreateSDiv(in[0], safe_divisor(in[0], in[1]));
      case OpCode::Rem:
        return fl ? round(b_.CreateFRem(in[0], in[1]), d) : b_.CreateSRem(in[0], safe_divisor(in[0], in[1]));
      case OpCode::Min:
        return fl ? b_.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, in[0], in[1])
                  : b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, in[0], in[1]);
      case OpCode::Max:
        return fl ? b_.CreateBinaryIntrinsic(llvm::Intrinsic::maxnum, in[0], in[1])
                  : b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, in[0], in[1]);
      case OpCode::And:
        return b_.CreateAnd(in[0], in[1]);
      case OpCode::Or:
        return b_.CreateOr(in[0], in[1]);
      case OpCode::Xor:
        return b_.CreateXor(in[0], in[1]);
      case OpCode::Shl:
      case OpCode::Shr: {
        // As PTX does: a shift by the width or more gives 0 (left) or the sign (right), never poison.
        unsigned bits = in[0]->getType()->getIntegerBitWidth();
        llvm::Value* too_far = b_.CreateICmpUGE(in[1], llvm::ConstantInt::get(in[1]->getType(), bits));
        llvm::Value* amount = b_.CreateSelect(too_far, llvm::ConstantInt::get(in[1]->getType(), bits - 1), in[1]);
        if (op.code == OpCode::Shr) return b_.CreateAShr(in[0], amount);
        return b_.CreateSelect(too_far, llvm::ConstantInt::get(in[0]->getType(), 0), b_.CreateShl(in[0], amount));
      }
      case OpCode::Cmp:
        return compare(ir::enum_attr<ir::CmpPred>(op, "pred"), in[0], in[1], at);
      case OpCode::Neg:
        return fl ? b_.CreateFNeg(in[0]) : b_.CreateNeg(in[0]);
      case OpCode::Not:
        return b_.CreateNot(in[0]);
      case OpCode::Exp:
      case OpCode::Exp2:
      case OpCode::Log:
      case OpCode::Log2:
      case OpCode::Sqrt:
      case OpCode::Sin:
      case OpCode::Cos:
      case OpCode::Floor:
      case OpCode::Ceil:
      case OpCode::Rsqrt:
      case OpCode::Erf:
        return round(math(op.code, in[0]), d);
      case OpCode::Abs:
        return fl ? b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, in[0])
                  : b_.CreateBinaryIntrinsic(llvm::Intrinsic::abs, in[0], b_.getFalse());
      case OpCode::Cast:
        return cast(in[0], at.dtype, d);
      case OpCode::Bitcast:
        if (rt.is_ptr) return at.is_ptr ? in[0] : b_.CreateIntToPtr(in[0], b_.getPtrTy());
        return from_mem(b_.CreateBitCast(to_mem(in[0], at.dtype), mem_type(d)), d);
      case OpCode::Select:
        return b_.CreateSelect(in[0], in[1], in[2]);
      case OpCode::Hint:
        return in[0];
      case OpCode::AddPtr:
        return b_.CreateGEP(mem_type(at.dtype), in[0], b_.CreateSExt(in[1], b_.getInt64Ty()));
      default:
        TD_ASSERT(false, "not an elementwise op: ", op.name());
    }
  }

  /// Integer division runs on every lane, masked-off ones included: a zero divisor (or
  /// MIN / -1) must give some value, not a trap, as it does on a GPU.
  llvm::Value* safe_divisor(llvm::Value* a, llvm::Value* b) {
    llvm::Type* t = b->getType();
    unsigned bits = t->getIntegerBitWidth();
    llvm::Value* zero = b_.CreateICmpEQ(b, llvm::ConstantInt::get(t, 0));
    llvm::Value* overflow =
        b_.CreateAnd(b_.CreateICmpEQ(a, llvm::ConstantInt::get(t, llvm::APInt::getSignedMinValue(bits))),
                     b_.CreateICmpEQ(b, llvm::ConstantInt::getSigned(t, -1)));
    return b_.CreateSelect(b_.CreateOr(zero, overflow), llvm::ConstantInt::get(t, 1), b);
  }

  llvm::Value* compare(ir::CmpPred p, llvm::Value* a, llvm::Value* b, const ir::Type& t) {
    if (t.is_float()) return b_.CreateFCmp(float_predicate(p), a, b);
    return b_.CreateICmp(int_predicate(p, t.is_ptr || t.dtype == DType::i1), a, b);
  }
  static llvm::CmpInst::Predicate float_predicate(ir::CmpPred p) {
    using P = llvm::CmpInst::Predicate;
    switch (p) {
      case ir::CmpPred::eq:
        return P::FCMP_OEQ;
      case ir::CmpPred::ne:
        return P::FCMP_UNE;
      case ir::CmpPred::lt:
        return P::FCMP_OLT;
      case ir::CmpPred::le:
        return P::FCMP_OLE;
      case ir::CmpPred::gt:
        return P::FCMP_OGT;
      case ir::CmpPred::ge:
        break;
    }
    return P::FCMP_OGE;
  }
  /// (`unsigned_`: pointers and i1)
  static llvm::CmpInst::Predicate int_predicate(ir::CmpPred p, bool unsigned_) {
    using P = llvm::CmpInst::Predicate;
    switch (p) {
      case ir::CmpPred::eq:
        return P::ICMP_EQ;
      case ir::CmpPred::ne:
        return P::ICMP_NE;
      case ir::CmpPred::lt:
        return unsigned_ ? P::ICMP_ULT : P::ICMP_SLT;
      case ir::CmpPred::le:
        return unsigned_ ? P::ICMP_ULE : P::ICMP_SLE;
      case ir::CmpPred::gt:
        return unsigned_ ? P::ICMP_UGT : P::ICMP_SGT;
      case ir::CmpPred::ge:
        break;
    }
    return unsigned_ ? P::ICMP_UGE : P::ICMP_SGE;
  }

  llvm::Value* cast(llvm::Value* v, DType from, DType to) {
    if (from == to) return v;
    llvm::Type* rt = reg_type(ir::Type::scalar(to));
    bool ff = ir::is_float(from), tf = ir::is_float(to);
    if (!ff && !tf) {
      if (to == DType::i1) return b_.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
      return from == DType::i1 ? b_.CreateZExt(v, rt) : b_.CreateSExtOrTrunc(v, rt);
    }
    if (!ff) return round(from == DType::i1 ? b_.CreateUIToFP(v, rt) : b_.CreateSIToFP(v, rt), to);
    if (!tf) {
      if (to == DType::i1) return b_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0));
      return b_.CreateFPToSI(v, rt);
    }
    return round(b_.CreateFPCast(v, rt), to);
  }

  /// One element of an atomic_rmw or atomic_cas op on *p (for CAS, `v` is the expected value
  /// and `desired` the new one); returns the old value.
  llvm::Value* atomic_update(const ir::Op& op, llvm::Value* p, llvm::Value* v, llvm::Value* desired,
                             llvm::SyncScope::ID scope = llvm::SyncScope::System) {
    return llvm_atomic(b_, atomic_kind(op), op.results[0]->type.dtype, p, v, desired,
                       ordering(ir::enum_attr<ir::MemOrder>(op, "order")), scope);
  }

  /// The starting value of a reduction: 0 for sum, the far end of the type for max and min.
  static llvm::Value* reduce_identity(ir::ReduceKind kind, llvm::Type* t) {
    if (kind == ir::ReduceKind::sum) return llvm::Constant::getNullValue(t);
    bool up = ir::takes_larger(kind);
    if (t->isFloatingPointTy()) return llvm::ConstantFP::getInfinity(t, up);
    unsigned bits = t->getIntegerBitWidth();
    return llvm::ConstantInt::get(t, up ? llvm::APInt::getSignedMinValue(bits) : llvm::APInt::getSignedMaxValue(bits));
  }

  /// if (cond) body(); in the function being built (straight-line when cond is true).
  void when(llvm::Value* cond, const std::function<void()>& body) {
    when_value(cond, nullptr, nullptr, [&]() -> llvm::Value* {
      body();
      return nullptr;
    });
  }
  /// cond ? value() : fallback, computing value() only when cond holds; `t` null for no value.
  llvm::Value* when_value(llvm::Value* cond, llvm::Type* t, llvm::Value* fallback,
                          const std::function<llvm::Value*()>& value) {
    if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(cond); c && c->isOne()) return value();
    llvm::Function* fn = b_.GetInsertBlock()->getParent();
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* then = llvm::BasicBlock::Create(b_.getContext(), "then", fn);
    auto* join = llvm::BasicBlock::Create(b_.getContext(), "then.end", fn);
    b_.CreateCondBr(cond, then, join);
    b_.SetInsertPoint(then);
    llvm::Value* v = value();
    llvm::BasicBlock* then_end = b_.GetInsertBlock();
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
    if (!t) return nullptr;
    llvm::PHINode* phi = b_.CreatePHI(t, 2);
    phi->addIncoming(fallback, pre);
    phi->addIncoming(v, then_end);
    return phi;
  }

  llvm::IRBuilder<> b_;

 private:
  llvm::Module& elem_module_;
};

}  // namespace tiledist::codegen
