// TMA copies onto mbarriers in the GPU IR lowering (codegen/gpu_ir/lowering.h; sm_90a): the
// kernel's tensor maps (a trailing 128-byte parameter per distinct `tensor` of its
// async_tma_copy ops, which the launch encodes: support/tma.h), and the barrier ops the
// pipelining pass writes around them.
#include "codegen/gpu_ir/lowering.h"
#include "llvm/IR/MDBuilder.h"

namespace tiledist::codegen::gpu_ir {

void LayoutLowering::collect_tensor_maps() {
  f_.walk([&](const ir::Op& op) {
    if (op.code != OpCode::AsyncTmaCopy) return;
    const std::string& line = op.str_attr("tensor");
    if (tma_maps_.count(line)) return;
    auto recipe = runtime::TmaRecipe::parse(line);
    if (!recipe) unsupported(op, str_cat("a malformed tensor '", line, "'"));
    tma_maps_[line] = static_cast<unsigned>(tma_recipes_.size());
    tma_recipes_.push_back(*recipe);
  });
}

llvm::Value* LayoutLowering::barrier_at(const ir::Value* bars, llvm::Value* index) {
  llvm::Value* at =
      b_.CreateAdd(b_.getInt32(static_cast<uint32_t>(val(bars).smem)), b_.CreateMul(index, b_.getInt32(8)));
  return b_.CreatePtrToInt(smem_at(at), b_.getInt32Ty());
}

void LayoutLowering::emit_init_barrier(const ir::Op& op) {
  const int64_t n = op.operands[0]->type.shape[0];
  when(is_thread0(), [&] {
    for (int64_t i = 0; i < n; ++i)
      ptx(b_.getVoidTy(), "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r",
          {barrier_at(op.operands[0], b_.getInt32(static_cast<uint32_t>(i))),
           b_.getInt32(static_cast<uint32_t>(op.int_attr("count")))});
    ptx(b_.getVoidTy(), "fence.mbarrier_init.release.cluster;", "", {});
  });
  warp_sync();
  barrier();  // (every thread sees them initialized before it waits or arrives)
}

void LayoutLowering::emit_async_tma_copy(const ir::Op& op) {
  const ir::Type& desc = op.operands[0]->type;
  const unsigned m = tma_maps_.at(op.str_attr("tensor"));
  const runtime::TmaRecipe& r = tma_recipes_.at(m);
  const int64_t rows = desc.shape[1], cols = desc.shape[2], esize = ir::dtype_bytes(desc.dtype);
  const int64_t tile_bytes = rows * cols * esize;
  llvm::Value* map = fn_->getArg(first_map_ + m);
  llvm::Value* index = val(op.operands[1]).scalar;
  llvm::Value* tile = b_.CreateAdd(b_.getInt32(static_cast<uint32_t>(val(op.operands[0]).smem)),
                                   b_.CreateMul(index, b_.getInt32(static_cast<uint32_t>(tile_bytes))));
  std::vector<llvm::Value*> coords;
  for (size_t i = 4; i < op.operands.size(); ++i) coords.push_back(val(op.operands[i]).scalar);
  llvm::Value* on = val(op.operands[3]).scalar;
  if (!producer_) on = b_.CreateAnd(is_thread0(), on);  // (the producer's one thread)
  when(on, [&] {
    llvm::Value* bar = barrier_at(op.operands[2], index);
    ptx(b_.getVoidTy(), "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r",
        {bar, b_.getInt32(static_cast<uint32_t>(tile_bytes))});
    const size_t rank = coords.size();
    std::string list;
    for (size_t d = 0; d < rank; ++d) list += str_cat(d ? ", " : "", "$", d + 2);
    const std::string text = str_cat("cp.async.bulk.tensor.", rank,
                                     "d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [$0], [$1, {", list,
                                     "}], [$", rank + 2, "];");
    std::string cons = "r,l";
    for (size_t d = 0; d <= rank; ++d) cons += ",r";
    // One box per 128 bytes of the tile's row: column block k at k * rows * 128 (the layout's
    // blocks, as wgmma reads them).
    for (int64_t k = 0; k * 128 < cols * esize; ++k) {
      llvm::Value* dst = b_.CreatePtrToInt(
          smem_at(b_.CreateAdd(tile, b_.getInt32(static_cast<uint32_t>(k * rows * 128)))), b_.getInt32Ty());
      std::vector<llvm::Value*> args = {dst, map};
      for (size_t d = 0; d < rank; ++d)
        args.push_back(d == 0 ? b_.CreateAdd(coords[0], b_.getInt32(static_cast<uint32_t>(k * r.box[0]))) : coords[d]);
      args.push_back(bar);
      ptx(b_.getVoidTy(), text, cons, args);
    }
  });
  if (!producer_) warp_sync();  // (thread 0's warp converged again)
}

void LayoutLowering::emit_wait_barrier(const ir::Op& op) {
  // (every thread waits, the issuer's wait too: the warps stay converged, as the .aligned
  // wgmma and ldmatrix instructions after it need; a wait of warp 0 alone made ptxas take the
  // wgmma after it for divergent code, C7518)
  llvm::Value* on = op.operands.size() > 3 ? val(op.operands[3]).scalar : b_.getTrue();
  llvm::Value* bar = barrier_at(op.operands[0], val(op.operands[1]).scalar);
  llvm::Value* parity = val(op.operands[2]).scalar;
  when(on, [&] {
    auto ready = [&] {
      llvm::Value* ok =
          ptx(b_.getInt32Ty(),
              "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\nselp.u32 $0, 1, 0, p;\n}",
              "=r,r,r", {bar, parity});
      return b_.CreateICmpNE(ok, b_.getInt32(0));
    };
    // The first try succeeds in the steady state; past it, a spin that tries again at once and
    // reads the clock only after a failed try (a tile that lands is seen without the clock's
    // latency), and gives up (traps) after 100 s: a copy that never lands is a failed launch,
    // not a hang.
    auto* spin = llvm::BasicBlock::Create(ctx_, "mbar.spin", fn_);
    auto* slow = llvm::BasicBlock::Create(ctx_, "mbar.slow", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "mbar.done", fn_);
    b_.CreateCondBr(ready(), done, spin, llvm::MDBuilder(ctx_).createBranchWeights(1 << 10, 1));
    llvm::BasicBlock* from = b_.GetInsertBlock();
    b_.SetInsertPoint(spin);
    llvm::PHINode* started = b_.CreatePHI(b_.getInt64Ty(), 2);
    started->addIncoming(b_.getInt64(0), from);
    b_.CreateCondBr(ready(), done, slow);
    b_.SetInsertPoint(slow);
    llvm::Value* now = target_->nanoseconds();
    llvm::Value* start = b_.CreateSelect(b_.CreateICmpEQ(started, b_.getInt64(0)), now, started);
    constexpr int64_t kTimeoutNs = int64_t(100) * 1000 * 1000 * 1000;
    when(b_.CreateICmpUGT(b_.CreateSub(now, start), b_.getInt64(kTimeoutNs)), [&] { target_->give_up(); });
    started->addIncoming(start, b_.GetInsertBlock());
    b_.CreateBr(spin);
    b_.SetInsertPoint(done);
  });
  if (!producer_) warp_sync();
}

void LayoutLowering::warp_sync() { ptx(b_.getVoidTy(), "bar.warp.sync -1;", "", {}); }

void LayoutLowering::emit_arrive_barrier(const ir::Op& op) {
  // (its wgmma reads of the tile are done: every group's, or all but the newest `pending`)
  const int64_t pending = op.has_attr("pending") ? op.int_attr("pending") : 0;
  if (pending)
    wgmma_wait(wgmma_groups_ - 1 - pending);
  else
    wgmma_wait_all();
  llvm::Value* bar = barrier_at(op.operands[0], val(op.operands[1]).scalar);
  if (op.operands.size() < 3) return void(ptx(b_.getVoidTy(), "mbarrier.arrive.shared::cta.b64 _, [$0];", "r", {bar}));
  ptx(b_.getVoidTy(), "{\n.reg .pred p;\nsetp.ne.u32 p, $1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [$0];\n}", "r,r",
      {bar, b_.CreateZExt(val(op.operands[2]).scalar, b_.getInt32Ty())});
}

}  // namespace tiledist::codegen::gpu_ir
