// The GPU IR lowering's driver (codegen/gpu_ir/lowering.h): which kernels it takes, the kernel
// function and its entry, the values as lowered, the dispatch of ops, and elementwise work.
#include "codegen/gpu_ir/lowering.h"

#include "codegen/passes/passes.h"
#include "ir/printer.h"
#include "ir/profile.h"

namespace tiledist::codegen::gpu_ir {

namespace {

bool distributed_layout(const ir::Type& t) { return t.layout && t.layout->is_distributed(); }
bool shared_layout(const ir::Type& t) { return t.layout && t.layout->kind == ir::Layout::Kind::shared; }

/// A tensor in a #shared layout is a wgmma operand: made by local_load or convert_layout, used
/// by dots only.
bool shared_view_ok(const ir::Value& v) {
  if (!v.def || (v.def->code != ir::OpCode::LocalLoad && v.def->code != ir::OpCode::ConvertLayout)) return false;
  bool ok = true;
  ir::for_each_use(*v.def->parent, &v,
                   [&](const ir::Op& user, size_t i) { ok &= user.code == ir::OpCode::Dot && i < 2; });
  return ok;
}

/// Why this lowering cannot take `op` yet, or empty.
std::string why_not(const ir::Op& op, const GpuTarget& target) {
  using ir::OpCode;
  for (const auto& r : op.results)
    if (r->type.is_tensor() && !r->type.is_memdesc() && !distributed_layout(r->type) &&
        !(shared_layout(r->type) && shared_view_ok(*r)))
      return shared_layout(r->type) ? "a tensor in shared memory used by other than a dot"
                                    : "a tensor without a layout";
  switch (op.code) {
    case OpCode::Dot: {
      const ir::Type& a = op.operands[0]->type;
      const ir::Type& c = op.results[0]->type;
      if (c.layout->kind != ir::Layout::Kind::mma) {  // (by FMAs: f32 registers of float operands)
        if (!a.is_float() || !op.operands[1]->type.is_float() || !c.is_float() || c.dtype == ir::DType::f64 ||
            a.dtype == ir::DType::f64 || op.operands[1]->type.dtype == ir::DType::f64)
          return "dot of other than f32, f16, bf16 or f8 values without a matrix unit";
        return "";
      }
      const ir::DType bt = op.operands[1]->type.dtype;
      const bool f8_dot = ir::is_f8(a.dtype) && ir::is_f8(bt) && c.dtype == ir::DType::f32;
      const bool half_dot =
          (a.dtype == ir::DType::bf16 || a.dtype == ir::DType::f16) && bt == a.dtype && c.dtype == ir::DType::f32;
      const int64_t eb = ir::dtype_bytes(a.dtype);
      if (c.layout->mma == ir::MmaKind::mfma) {
        if (!target.mfma_takes(a.dtype, bt) || !(f8_dot || half_dot))
          return "dot on MFMA of other than 16-bit or f8 operands it takes into f32";
        return "";
      }
      if (!target.mma_sync()) return "dot on MFMA";
      const bool wgmma = c.layout->mma == ir::MmaKind::wgmma && target.hopper();
      // (f8 operands: wgmma, and mma.sync's m16n8k32 from sm_89 on, of our targets sm_90a's)
      if (!half_dot && !(f8_dot && target.hopper()))
        return "dot of other than 16-bit operands (or f8 ones on sm_90a) into f32";
      if (f8_dot && wgmma && (a.layout->kind != ir::Layout::Kind::shared || op.operands[1]->type.layout->order[0] != 0))
        return "an f8 wgmma whose operands are not K-major tiles in shared memory";
      for (int i = 0; i < 2; ++i) {
        const ir::LayoutRef& l = op.operands[i]->type.layout;
        if (wgmma && l->kind == ir::Layout::Kind::shared) {
          // Stored rows of 128 bytes (or column blocks of them), 8-row atoms: what the
          // descriptors say; A of f8 K-major (its dimension 1 contiguous; 16-bit types either way).
          const int64_t line = op.operands[i]->type.shape[static_cast<size_t>(l->order[0])];
          const int64_t width = l->block ? std::min(l->block, line) : line;
          if (l->vec * eb != 16 || l->per_phase != 1 || l->max_phase != 8 || width * eb != 128)
            return "a wgmma operand in shared memory not in 128-byte swizzled rows";
          if (i == 0 && l->order[0] != 1 && !half_dot)
            return "an f8 wgmma A operand in shared memory that is not K-major";
          continue;
        }
        if (wgmma && i == 1) return "wgmma's B operand in registers";
        if (l->kind != ir::Layout::Kind::dot_operand || l->k_width * eb != 4 || !(*l->parent == *c.layout))
          return "dot operands not in the accumulator's dot-operand layouts";
      }
      if (wgmma && (c.layout->warps_per_cta[0] % 4 || c.layout->warps_per_cta[1] != 1 ||
                    c.shape[0] % (16 * c.layout->warps_per_cta[0])))
        return "a wgmma accumulator other than a warpgroup's 64 rows each (of every instruction)";
      const MatrixInstr* wg = target.matrix_instr(MatrixUnit::wgmma);
      if (wgmma && (!wg || c.shape[1] % wg->n_step || c.shape[1] > wg->n || a.shape[1] * eb % wg->k_bytes))
        return "a wgmma of other than N a multiple of 8 up to 256 and K a multiple of 32 bytes";
      return "";
    }
    case OpCode::AsyncCopy:
      if (op.has_attr("via") && op.str_attr("via") != "cp.async") return "async_copy other than by cp.async";
      return "";
    case OpCode::InitBarrier:
    case OpCode::AsyncTmaCopy:
    case OpCode::WaitBarrier:
    case OpCode::ArriveBarrier:
    case OpCode::WarpSpecialize:
      return target.hopper() ? "" : "TMA copies, mbarriers and warp specialization off sm_90a";
    default:
      return "";
  }
}

}  // namespace

std::string unsupported_op(const ir::Function& f, const GpuTarget& target) {
  std::string why;
  f.walk([&](const ir::Op& op) {
    if (!why.empty()) return;
    for (const auto& region : op.regions)
      for (const auto& a : region->args)
        if (a->type.is_memdesc())
          why = str_cat(op.name(), " (a shared buffer carried into a region)");
        else if (a->type.is_tensor() && !distributed_layout(a->type))
          why = "a tensor without a layout";
    if (!op.regions.empty())
      for (const auto& r : op.results)
        if (r->type.is_memdesc()) why = str_cat(op.name(), " (a shared buffer as a result)");
    if (!why.empty()) return;
    std::string w = why_not(op, target);
    if (!w.empty()) why = w == op.name() ? w : str_cat(op.name(), " (", w, ")");
  });
  return why;
}

LayoutLowering::LayoutLowering(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts,
                               MakeGpuTarget make)
    : LayoutLowering(f, ctx, opts, make, std::make_unique<llvm::Module>(f.name, ctx)) {}

LayoutLowering::LayoutLowering(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts,
                               MakeGpuTarget make, std::unique_ptr<llvm::Module> m)
    : WorldOps(ctx, *m, opts, make, f.name),
      f_(f),
      ctx_(ctx),
      opts_(opts),
      module_(std::move(m)),
      threads_(opts.num_warps * target_->warp_size()) {}

GpuModule LayoutLowering::run() {
  check_threads(threads_, opts_);
  module_->setTargetTriple(target_->triple());
  std::vector<llvm::Type*> params;
  for (auto& a : f_.body.args) params.push_back(target_->param_type(reg_type(a->type)));
  const bool with_world = uses_world(f_.body);
  if (with_world) params.push_back(b_.getPtrTy(1));  // the DeviceWorld (support/device_world.h)
  profile_regions_ = ir::profile_regions(f_);
  const bool with_profile = !profile_regions_.empty();
  if (with_profile) params.push_back(b_.getPtrTy(1));  // the ProfileBuffer (support/profile_abi.h)
  llvm::FunctionType* fty = nullptr;
  collect_tensor_maps();
  first_map_ = static_cast<unsigned>(params.size());
  for (size_t i = 0; i < tma_recipes_.size(); ++i) params.push_back(b_.getPtrTy());
  fty = llvm::FunctionType::get(b_.getVoidTy(), params, false);
  fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, f_.name, module_.get());
  for (auto& a : f_.body.args) fn_->getArg(a->index)->setName(a->name);
  f_.walk([&](const ir::Op& op) {
    if (op.code == OpCode::WarpSpecialize) producer_threads_ = 128;  // (a warpgroup)
  });
  target_->define_kernel(fn_, threads_ + producer_threads_, first_map_, static_cast<unsigned>(tma_recipes_.size()));
  smem_ = new llvm::GlobalVariable(*module_, llvm::ArrayType::get(b_.getInt8Ty(), 0), false,
                                   llvm::GlobalValue::ExternalLinkage, nullptr, "tiledist_smem", nullptr,
                                   llvm::GlobalValue::NotThreadLocal, 3);
  smem_->setAlignment(llvm::Align(128));
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
  llvm::FastMathFlags contract;  // (a multiply and an add may fuse: attention's S * scale - max)
  contract.setAllowContract(true);
  b_.setFastMathFlags(contract);
  tid_ = target_->thread_id();
  for (auto& a : f_.body.args) vals_[a.get()] = LVal::of(target_->param(fn_->getArg(a->index)));
  if (with_world) world_ = fn_->getArg(static_cast<unsigned>(f_.body.args.size()));
  if (with_profile) {
    profile_buffer_ = fn_->getArg(static_cast<unsigned>(f_.body.args.size() + (with_world ? 1 : 0)));
    begin_profile();
  }
  f_.walk([&](const ir::Op& op) {
    wgmma_ |= op.code == OpCode::Dot && op.results[0]->type.layout->kind == ir::Layout::Kind::mma &&
              op.results[0]->type.layout->mma == ir::MmaKind::wgmma && target_->hopper();
  });
  if (wgmma_) smem_->setAlignment(llvm::Align(1024));  // (wgmma's 128-byte swizzle atoms: buffers at multiples of 1024)
  plan_shared_buffers();
  uses_ = ir::count_uses(f_.body);
  emit_block(f_.body);
  target_->size_shared_memory(smem_, smem_bytes_);
  smem_ = nullptr;
  // A module LLVM rejects is this lowering's bug, not the kernel's: an Error naming it (lower_gpu
  // tries the target's next form, then says why none took it), not an abort.
  std::string bad;
  llvm::raw_string_ostream os(bad);
  if (llvm::verifyModule(*module_, &os))
    throw Error(str_cat("tiledist: the GPU IR lowering made invalid LLVM IR for '", f_.name, "' (", opts_.arch,
                        "): ", os.str().substr(0, 400)));
  return GpuModule{std::move(module_), f_.name,      smem_bytes_, threads_ + producer_threads_,
                   with_world,         with_profile, tma_recipes_};
}

[[noreturn]] void LayoutLowering::unsupported(const ir::Op& op, const std::string& what) {
  throw Error::at(op.name(), op.loc, str_cat(what, " is not supported by the GPU IR lowering on ", opts_.arch, " yet"));
}

LVal& LayoutLowering::val(const ir::Value* v) {
  if (auto p = wgmma_pending_.find(v); p != wgmma_pending_.end()) wgmma_wait(p->second);
  auto it = vals_.find(v);
  TD_ASSERT(it != vals_.end(), "value used before lowering");
  return it->second;
}

std::vector<llvm::Value*> LayoutLowering::through_asm(const std::string& text, const std::vector<llvm::Value*>& regs,
                                                      const std::string& more_cons,
                                                      const std::vector<llvm::Value*>& more) {
  std::string cons;
  for (size_t i = 0; i < regs.size(); ++i) cons += str_cat(i ? "," : "", "=f");
  for (size_t i = 0; i < regs.size(); ++i) cons += str_cat(",", i);
  cons += more_cons;
  if (!cons.empty() && cons[0] == ',') cons.erase(0, 1);
  std::vector<llvm::Value*> args = regs;
  args.insert(args.end(), more.begin(), more.end());
  llvm::Type* ty = regs.empty() ? b_.getVoidTy()
                                : static_cast<llvm::Type*>(llvm::StructType::get(
                                      ctx_, std::vector<llvm::Type*>(regs.size(), b_.getFloatTy())));
  llvm::Value* r = ptx(ty, text, cons, args);
  llvm::cast<llvm::CallInst>(r)->addFnAttr(llvm::Attribute::Convergent);
  std::vector<llvm::Value*> out;
  for (size_t i = 0; i < regs.size(); ++i) out.push_back(b_.CreateExtractValue(r, {static_cast<unsigned>(i)}));
  return out;
}

void LayoutLowering::wgmma_wait(int64_t group) {
  std::vector<const ir::Value*> done;
  std::vector<llvm::Value*> regs;
  for (auto& [v, g] : wgmma_pending_)
    if (g <= group) {
      done.push_back(v);
      const LVal& x = vals_.at(v);
      regs.insert(regs.end(), x.regs.begin(), x.regs.end());
    }
  for (const ir::Value* v : done) wgmma_pending_.erase(v);
  std::vector<llvm::Value*> back =
      through_asm(str_cat("wgmma.wait_group.sync.aligned ", wgmma_groups_ - 1 - group, ";"), regs);
  size_t k = 0;
  for (const ir::Value* v : done)
    for (llvm::Value*& x : vals_.at(v).regs) x = back[k++];
}

void LayoutLowering::wgmma_wait_except(const ir::Value* kept) {
  int64_t newest = -1;
  for (auto& [v, g] : wgmma_pending_)
    if (v != kept) newest = std::max(newest, g);
  if (newest >= 0) wgmma_wait(newest);
}

void LayoutLowering::emit_block(const ir::Block& block) {
  for (auto& op : block.ops) {
    // (a region's values in flight complete before it ends: the code after it, or the other
    // arm, does not know them; but a loop's carried accumulator, emit_for)
    if (op->info().flags & ir::TERM) {
      if (op->code == OpCode::Yield && block.parent && block.parent->code == OpCode::For && kept_in_flight_)
        wgmma_wait_except(kept_in_flight_);
      else
        wgmma_wait_all();
    }
    emit(*op);
  }
}

void LayoutLowering::emit(const ir::Op& op) {
  current_ = &op;
  if (!op.regions.empty()) wgmma_wait_all();  // (the region's code does not know the groups in flight)
  const ir::Type* rt = op.results.empty() ? nullptr : &op.results[0]->type;
  switch (op.code) {
    case OpCode::Constant:
      return define(op, LVal::of(constant_of(op)));
    case OpCode::ProgramId:
    case OpCode::NumPrograms: {
      int axis = static_cast<int>(op.int_attr("axis"));
      return define(op,
                    LVal::of(op.code == OpCode::ProgramId ? target_->program_id(axis) : target_->num_programs(axis)));
    }
    case OpCode::Arange:
      return emit_arange(op);
    case OpCode::Splat: {
      LVal g;
      g.regs.assign(static_cast<size_t>(linear(*rt).in_size(ir::LinearLayout::reg)), val(op.operands[0]).scalar);
      return define(op, g);
    }
    case OpCode::Hint:
      return define(op, val(op.operands[0]));
    case OpCode::Rank:
    case OpCode::NumRanks:
    case OpCode::SymmAt:
    case OpCode::Wait:
    case OpCode::ConsumeToken:
    case OpCode::Memcpy:
    case OpCode::Fence:
    case OpCode::Barrier:
      return emit_distributed(op);
    case OpCode::Profile:
      return emit_profile(op);
    case OpCode::ExpandDims: {
      const int64_t axis = op.int_attr("axis");
      return define(op, move(op.operands[0], *rt, [axis](std::vector<int64_t> c) {
                      c.erase(c.begin() + axis);
                      return c;
                    }));
    }
    case OpCode::Broadcast: {
      const std::vector<int64_t> from = op.operands[0]->type.shape;
      return define(op, move(op.operands[0], *rt, [from](std::vector<int64_t> c) {
                      for (size_t d = 0; d < c.size(); ++d)
                        if (from[d] == 1) c[d] = 0;
                      return c;
                    }));
    }
    case OpCode::Trans: {
      const std::vector<int64_t> perm = op.ints_attr("perm");
      return define(op, move(op.operands[0], *rt, [perm](const std::vector<int64_t>& c) {
                      std::vector<int64_t> s(c.size());
                      for (size_t d = 0; d < c.size(); ++d) s[static_cast<size_t>(perm[d])] = c[d];
                      return s;
                    }));
    }
    case OpCode::ConvertLayout:
      if (rt->layout->kind == ir::Layout::Kind::shared) return emit_to_shared(op);
      return define(op, move(op.operands[0], *rt, [](const std::vector<int64_t>& c) { return c; }));
    case OpCode::Reshape: {
      if (!rt->is_tensor()) unsupported(op, "a reshape to a scalar");
      // (the same row-major element: shapes are powers of two, so the map is linear in the bits)
      const std::vector<int64_t> to = rt->shape, from = op.operands[0]->type.shape;
      return define(op, move(op.operands[0], *rt, [to, from](const std::vector<int64_t>& c) {
                      int64_t e = 0;
                      for (size_t d = 0; d < c.size(); ++d) e = e * to[d] + c[d];
                      std::vector<int64_t> s(from.size());
                      for (size_t d = from.size(); d-- > 0;) s[d] = e % from[d], e /= from[d];
                      return s;
                    }));
    }
    case OpCode::Load:
      return emit_load(op);
    case OpCode::Store:
      return emit_store(op);
    case OpCode::Prefetch:
      return emit_prefetch(op);
    case OpCode::AtomicRMW:
    case OpCode::AtomicCAS:
      return emit_atomic(op);
    case OpCode::LocalAlloc:
      return emit_local_alloc(op);
    case OpCode::AsyncCopy:
      return emit_async_copy(op);
    case OpCode::AsyncCommit:
      ptx(b_.getVoidTy(), "cp.async.commit_group;", "", {});
      return;
    case OpCode::AsyncWait:
      // Each thread waits for its own copies; the barrier makes everyone's visible to all (and
      // orders this iteration's copies into a buffer after every read of it in the last one).
      // `own`: each thread reads back only the elements it copied (a streaming loop's tiles, each
      // element held by one thread, read in the layout they were copied in), and overwrites
      // only those it read: no barrier.
      ptx(b_.getVoidTy(), str_cat("cp.async.wait_group ", op.int_attr("pending"), ";"), "", {});
      if (op.has_attr("own")) return;
      if (wgmma_) ptx(b_.getVoidTy(), "fence.proxy.async.shared::cta;", "", {});
      barrier();
      return;
    case OpCode::LocalLoad:
      return emit_local_load(op);
    case OpCode::InitBarrier:
      return emit_init_barrier(op);
    case OpCode::AsyncTmaCopy:
      return emit_async_tma_copy(op);
    case OpCode::WaitBarrier:
      return emit_wait_barrier(op);
    case OpCode::ArriveBarrier:
      return emit_arrive_barrier(op);
    case OpCode::WarpSpecialize:
      return emit_warp_specialize(op);
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
    default:
      break;
  }
  std::string why = why_not(op, *target_);
  if (!why.empty()) unsupported(op, why);
  emit_elementwise(op);
}

void LayoutLowering::emit_elementwise(const ir::Op& op) {
  const ir::Type& rt = op.results[0]->type;
  if (!rt.is_tensor()) {
    std::vector<llvm::Value*> in;
    for (auto* v : op.operands) in.push_back(val(v).scalar);
    return define(op, LVal::of(elementwise(op, in)));
  }
  LVal g;
  const size_t n = static_cast<size_t>(linear(rt).in_size(ir::LinearLayout::reg));
  for (auto* v : op.operands)
    if (!(v->type.layout && *v->type.layout == *rt.layout) || val(v).regs.size() != n)
      unsupported(op,
                  str_cat("an operand laid out otherwise than its result (", v->type.str(), " for ", rt.str(), ")"));
  const DType from = op.operands.empty() ? rt.dtype : op.operands[0]->type.dtype;
  if (op.code == OpCode::Cast && (rt.dtype == DType::bf16 || rt.dtype == DType::f16) && from == DType::f32) {
    // The bits once: the registers are what they read back as, and mma.sync packs the bits.
    for (llvm::Value* x : val(op.operands[0]).regs) {
      g.wide.push_back(x);
      llvm::Value* m = to_mem(x, rt.dtype);
      g.bits.push_back(rt.dtype == DType::f16 ? b_.CreateBitCast(m, b_.getInt16Ty()) : m);
      g.regs.push_back(from_mem(m, rt.dtype));
    }
    return define(op, g);
  }
  if (op.code == OpCode::Cast && ir::is_f8(rt.dtype) && ir::is_float(from) && !ir::is_f8(from)) {
    // The bits once, as above (a matrix unit takes them; the registers read them back), two
    // registers in one instruction where the target has one.
    const std::vector<llvm::Value*>& xs = val(op.operands[0]).regs;
    for (size_t i = 0; i < xs.size(); ++i) {
      llvm::Value* x = b_.CreateFPCast(xs[i], b_.getFloatTy());
      if (i + 1 < xs.size() && !llvm::isa<llvm::Constant>(x)) {
        auto [lo, hi] = target_->f8_convert_pair(x, b_.CreateFPCast(xs[i + 1], b_.getFloatTy()), rt.dtype);
        if (lo) {
          g.bits.insert(g.bits.end(), {lo, hi});
          g.regs.insert(g.regs.end(), {from_mem(lo, rt.dtype), from_mem(hi, rt.dtype)});
          ++i;
          continue;
        }
      }
      g.bits.push_back(to_mem(x, rt.dtype));
      g.regs.push_back(from_mem(g.bits.back(), rt.dtype));
    }
    return define(op, g);
  }
  for (size_t j = 0; j < n; ++j) {
    std::vector<llvm::Value*> in;
    for (auto* v : op.operands) in.push_back(val(v).regs[j]);
    g.regs.push_back(elementwise(op, in));
  }
  define(op, g);
}

}  // namespace tiledist::codegen::gpu_ir

namespace tiledist::codegen {

void explain(const std::string& kernel, const std::string& what) {
  if (const char* e = std::getenv("TILEDIST_EXPLAIN"); e && *e && std::string(e) != "0")
    std::fprintf(stderr, "tiledist: kernel '%s': %s\n", kernel.c_str(), what.c_str());
}

GpuModule lower_gpu(const ir::Function& optimized, llvm::LLVMContext& ctx, const GpuOptions& opts, MakeGpuTarget make) {
  // Each target's own form of the GPU IR: on sm_90a wgmma (its operands in shared memory, but
  // attention's P in registers), and where that form is refused (operand tiles whose rows are
  // not 128 bytes: a GEMM with BK = 32), sm_89's (mma.sync, ldmatrix, f8 operands too), which
  // Hopper also runs; "gpu_ir_mma" takes sm_89's form there at once, to compare.
  const std::string mma_sync_form = "sm_89";
  const bool wgmma = GpuPassContext::for_arch(opts.arch, opts.num_warps).wgmma;
  std::vector<std::string> forms = {wgmma && opts.lowering == "gpu_ir_mma" ? mma_sync_form : opts.arch};
  if (wgmma && forms[0] == opts.arch) forms.push_back(mma_sync_form);
  const std::string text = ir::print(optimized);
  const std::string ours = "tiledist: ";  // (an Error's prefix, dropped from a reason)
  std::string why;
  for (const std::string& pass_arch : forms) {
    std::unique_ptr<ir::Function> f = ir::parse_function(text, optimized.name);
    const GpuPassContext passes = GpuPassContext::for_compile(pass_arch, opts.num_warps, opts.num_stages, opts.lowering,
                                                              opts.tma, opts.warp_specialize);
    run_gpu_passes(*f, passes);
    // An op refused up front, or one whose layouts this lowering finds it cannot take as it
    // lowers (a dot whose layouts do not hold its fragments, a reduction over mixed
    // dimensions), is a reason: the next form takes it, or the Error below says why none did.
    std::string w;
    try {
      gpu_ir::LayoutLowering lowering(*f, ctx, opts, make);
      w = lowering.refused();
      if (w.empty()) return lowering.run();
    } catch (const Error& e) {
      w = e.what();
      if (w.rfind(ours, 0) == 0) w.erase(0, ours.size());
    }
    if (pass_arch != forms.back())
      explain(optimized.name, str_cat("the GPU IR's ", pass_arch, " form does not take it (", w, "): ", forms.back(),
                                      "'s form instead"));
    if (why.empty())
      why = w;
    else if (w != why)
      why = str_cat(why, " (in ", pass_arch, "'s form: ", w, ")");
  }
  throw Error(str_cat(ours, "kernel '", optimized.name, "': the GPU lowering does not take it: ", why));
}

}  // namespace tiledist::codegen
