// The GPU lowering's driver (codegen/gpu/lowering.h): the kernel function and its entry, the
// values of the IR as lowered (in the cyclic layout or the MMA one), the dispatch of each op to
// its family's lowering, and the small emission helpers every family uses (inline PTX, locals,
// counted loops); lower_gpu, codegen's entry point.
#include "codegen/gpu/lowering.h"

#include "codegen/passes/passes.h"

namespace tiledist::codegen::gpu {

GpuLowering::GpuLowering(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts, MakeGpuTarget make)
    : GpuLowering(f, ctx, opts, make, std::make_unique<llvm::Module>(f.name, ctx)) {}

GpuLowering::GpuLowering(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts, MakeGpuTarget make,
                         std::unique_ptr<llvm::Module> m)
    : WorldOps(ctx, *m, opts, make, f.name),
      f_(f),
      ctx_(ctx),
      opts_(opts),
      module_(std::move(m)),
      threads_(opts.num_warps * target_->warp_size()) {}

GpuModule GpuLowering::run() {
  check_threads(threads_, opts_);
  module_->setTargetTriple(target_->triple());
  if (!opts_.data_layout.empty()) module_->setDataLayout(opts_.data_layout);
  std::vector<llvm::Type*> params;
  for (auto& a : f_.body.args) params.push_back(target_->param_type(reg_type(a->type)));
  const bool with_world = uses_world(f_.body);
  if (with_world) params.push_back(b_.getPtrTy(1));  // the DeviceWorld (support/device_world.h)
  find_wgmma_loops();                                // (and the TMA tensor maps they take)
  first_map_ = static_cast<unsigned>(params.size());
  for (size_t i = 0; i < tma_recipes_.size(); ++i) params.push_back(b_.getPtrTy());
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), params, false);
  fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, f_.name, module_.get());
  for (auto& a : f_.body.args) fn_->getArg(a->index)->setName(a->name);  // (AMDGPU metadata lists them)
  target_->define_kernel(fn_, block_threads(), first_map_, static_cast<unsigned>(tma_recipes_.size()));
  smem_ = new llvm::GlobalVariable(*module_, llvm::ArrayType::get(b_.getInt8Ty(), 0), false,
                                   llvm::GlobalValue::ExternalLinkage, nullptr, "tiledist_smem", nullptr,
                                   llvm::GlobalValue::NotThreadLocal, 3);
  smem_->setAlignment(llvm::Align(16));
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
  tid_ = target_->thread_id();
  for (auto& a : f_.body.args) vals_[a.get()] = GVal{target_->param(fn_->getArg(a->index)), {}};
  if (with_world) world_ = fn_->getArg(static_cast<unsigned>(f_.body.args.size()));
  uses_ = ir::count_uses(f_.body);
  max_vec_ = narrow_memory(f_) ? 8 : 4;
  if (!wgmma_shapes_.empty()) smem_->setAlignment(llvm::Align(1024));  // wgmma's 128-byte swizzle atoms
  if (ws_) emit_warp_specialized_entry();
  emit_block(f_.body);
  target_->size_shared_memory(smem_, smem_bytes_);
  smem_ = nullptr;
  verify_lowered(opts_.arch.c_str());
  return GpuModule{std::move(module_), f_.name, smem_bytes_, block_threads(), with_world, tma_recipes_};
}

[[noreturn]] void GpuLowering::unsupported(const ir::Op& op, const std::string& what) {
  throw Error::at(op.name(), op.loc, str_cat(what, " is not supported on ", opts_.arch, " yet"));
}

GVal& GpuLowering::raw(const ir::Value* v) {
  auto it = vals_.find(v);
  TD_ASSERT(it != vals_.end(), "value used before lowering");
  return it->second;
}

GVal& GpuLowering::val(const ir::Value* v) {
  auto c = converted_.find(v);
  if (c != converted_.end()) return c->second;
  GVal& g = raw(v);
  if (!g.mma) return g;
  return converted_[v] = cyclic_from_mma(g, v->type);
}

llvm::Value* GpuLowering::element(const ir::Value* v, int64_t j) {
  const GVal& g = val(v);
  return g.slots.empty() ? g.scalar : g.slots[j];
}

void GpuLowering::emit_block(const ir::Block& block) {
  for (auto& op : block.ops) emit(*op);
}

void GpuLowering::emit(const ir::Op& op) {
  converted_.clear();
  if (op.code == OpCode::Load && loads_into_mma(op)) return void(mma_loads_.insert(&op));  // done by its user
  // Operands in the MMA layout are converted up front, where the conversion dominates every
  // use inside the op (a dot its accumulator and hint take them as they are; loops manage their
  // own). A dot's A and B in the MMA layout (a cast accumulator: attention's P) are converted
  // here too, not where the dot stages them, which is shared memory the conversion would use.
  const bool in_mma = in_mma_layout(op);
  const bool mma_dot = op.code == OpCode::Dot && mma_eligible(op);
  bool keeps_layout = op.code == OpCode::Hint || op.code == OpCode::For || op.code == OpCode::Yield ||
                      !op.regions.empty() || stores_from_mma(op) || in_mma;
  if (!keeps_layout)
    for (size_t i = 0; i < op.operands.size(); ++i) {
      const ir::Value* v = op.operands[i];
      if (mma_dot && i == 2) continue;
      if (vals_.count(v) && raw(v).mma && !converted_.count(v)) converted_[v] = cyclic_from_mma(raw(v), v->type);
    }
  if (in_mma)
    emit_in_mma_layout(op);
  else
    emit_op(op);
  converted_.clear();
}

void GpuLowering::emit_op(const ir::Op& op) {
  const ir::Type* rt = op.results.empty() ? nullptr : &op.results[0]->type;
  switch (op.code) {
    case OpCode::Constant:
      return define(op, {constant_of(op), {}});
    case OpCode::ProgramId:
    case OpCode::NumPrograms: {
      int axis = static_cast<int>(op.int_attr("axis"));
      return define(op, {op.code == OpCode::ProgramId ? target_->program_id(axis) : target_->num_programs(axis), {}});
    }
    case OpCode::Arange: {
      GVal g;
      for (int64_t j = 0; j < slots_of(*rt); ++j)
        g.slots.push_back(b_.CreateAdd(element_index(*rt, j), b_.getInt32(static_cast<int32_t>(op.int_attr("start")))));
      return define(op, g);
    }
    case OpCode::Splat:
      return define(op, {nullptr, std::vector<llvm::Value*>(slots_of(*rt), val(op.operands[0]).scalar)});
    case OpCode::Hint:
      return define(op, raw(op.operands[0]));  // keeps its layout
    case OpCode::Reshape:
    case OpCode::ExpandDims:
    case OpCode::ConsumeToken:
      return define(op, val(op.operands[0]));  // the same elements in the same order
    case OpCode::Broadcast:
      return emit_permute(op);
    case OpCode::Trans:
      if (deferred_loads_.count(&op)) return;  // B^T's tile, which its pipelined loop reads K-major
      return emit_permute(op);
    case OpCode::Load:
      if (deferred_loads_.count(&op)) return;  // filled by its pipelined loop
      return emit_load(op);
    case OpCode::Store:
      return emit_store(op);
    case OpCode::AtomicRMW:
    case OpCode::AtomicCAS:
      return emit_atomic(op);
    case OpCode::Reduce:
      return emit_reduce(op);
    case OpCode::Dot:
      return emit_dot(op);
    case OpCode::For:
      return emit_for(op);
    case OpCode::If:
      return emit_if(op);
    case OpCode::While:
      return emit_while(op);
    case OpCode::Yield:
    case OpCode::Condition:
      return;
    case OpCode::Return:
      b_.CreateRetVoid();
      return;
    case OpCode::Rank:
      return define(op, {rank(), {}});
    case OpCode::NumRanks:
      return define(op, {num_ranks(), {}});
    case OpCode::SymmAt:
      return emit_symm_at(op);
    case OpCode::Wait:
      return emit_wait(op);
    case OpCode::Memcpy:
      return emit_memcpy(op);
    case OpCode::Fence:
      fence(ir::enum_attr<ir::MemOrder>(op, "order"), ir::enum_attr<ir::MemScope>(op, "scope"));
      return;
    case OpCode::Barrier:
      return emit_device_barrier();
    case OpCode::ConvertLayout:
    case OpCode::LocalAlloc:
    case OpCode::AsyncCopy:
    case OpCode::AsyncCommit:
    case OpCode::AsyncWait:
    case OpCode::LocalLoad:
      unsupported(op, "GPU IR (layouts, shared-memory buffers) in this lowering, which takes the optimized IR,");
    default:
      break;
  }
  if (!rt->is_tensor()) {
    std::vector<llvm::Value*> in;
    for (auto* v : op.operands) in.push_back(val(v).scalar);
    return define(op, {elementwise(op, in), {}});
  }
  GVal g;
  for (int64_t j = 0; j < slots_of(*rt); ++j) {
    std::vector<llvm::Value*> in;
    for (auto* v : op.operands) in.push_back(element(v, j));
    g.slots.push_back(elementwise(op, in));
  }
  define(op, g);
}

llvm::Value* GpuLowering::ptx(llvm::Type* ret, const std::string& text, std::string constraints,
                              const std::vector<llvm::Value*>& args) {
  return inline_asm(b_, ret, text, std::move(constraints), args);
}

}  // namespace tiledist::codegen::gpu

namespace tiledist::codegen {

GpuModule lower_gpu(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts, MakeGpuTarget make) {
  const bool legacy = opts.lowering == "legacy";
  // Kernels go through the GPU passes by default (layouts, pipelines and warp specialization as
  // the IR states them) on every target the passes know (sm_80, sm_90a, gfx90a, gfx942), where
  // the GPU IR lowering takes every op; a lowering named in the options asks for them anywhere.
  const std::optional<GpuPassContext> facts = GpuPassContext::find(opts.arch, opts.num_warps);
  if (!legacy && (!opts.lowering.empty() || facts)) {
    GpuModule m;
    std::string why;
    if (lower_gpu_ir(f, ctx, opts, make, m, &why)) return m;
    if (opts.lowering == "gpu_ir_only")
      throw Error(str_cat("tiledist: kernel '", f.name, "': the GPU IR lowering does not take ", why, " yet"));
    explain(f.name, str_cat("the GPU IR lowering does not take ", why, ": the optimized IR's lowering instead"));
  }
  gpu::GpuLowering lowering(f, ctx, opts, make);
  GpuModule m = lowering.run();
  // Warp specialization keeps the loop's buffers for the whole kernel, under the scratch of
  // everything else (an epilogue that stages its tile): where that exceeds what a program may
  // have (227 KiB on sm_90), the kernel is lowered again without it.
  constexpr int64_t kMaxSharedBytes = 227 * 1024;
  if (lowering.warp_specialized() && m.shared_bytes > kMaxSharedBytes) {
    gpu::GpuLowering plain(f, ctx, opts, make);
    plain.without_warp_specialization();
    return plain.run();
  }
  return m;
}

}  // namespace tiledist::codegen
