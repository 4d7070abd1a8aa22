// Sequence-parallel attention by AllGather (kernels/sp_attention.h), as Triton-distributed's
// sp_ag_attention: each rank's keys and values go to every other rank by the copy engine (the
// host's memcpy on the CPU), each slice's arrival signalled by a word of the call's number;
// the attention kernel starts on its own slice (first copied into its slot here, on the run's
// stream) and takes the peers' slices one by one, waiting for each one's word, nearest rank
// before first, so that the gather runs under the math. The loop over a slice's key blocks is
// attention's (attention_tile.h).
//
// The protocol, as AgGemm's copy-engine gather (kernels/ag_gemm.cpp): calls alternate between
// two gathered buffers and the words only grow; a rank copies call c + 1 into a peer's buffer
// only once its kernel of call c has had every peer's word of call c (causal: the slices of
// the ranks after it unread, but their words waited for all the same), which each peer set
// after its kernel of call c - 1 (the last reader of that buffer) was done. A copy to a peer
// on another GPU runs on the copy engines, beside kernels that may hold every SM while they
// wait; a copy to a peer sharing our GPU runs on its SMs, so it goes before our kernel, on its
// stream. Runs of every communicating object are queued in one order a rank (RunOrder).
#include "kernels/sp_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "kernels/attention_tile.h"
#include "kernels/sp_run_check.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;
using tl::Values;

template <class T>
void sp_ag_attention(tl::Ptr<T> q, tl::Ptr<T> k_all, tl::Ptr<T> v_all, tl::Ptr<T> o, tl::Ptr<int32_t> flags,
                     tl::Int batch, tl::Int seqlen, tl::Int H, tl::Int H_KV, tl::Int call, tl::Float sm_scale,
                     tl::Const<int> HEAD_DIM, tl::Const<int> BLOCK_M, tl::Const<int> BLOCK_N, tl::Const<int> CAUSAL) {
  const int D = HEAD_DIM;
  const tl::DType dtype = dtype_of<T>();
  auto n = dist::num_ranks(), me = dist::rank();
  auto pid_m = tl::program_id(0), off_hz = tl::program_id(1);
  auto b = off_hz / H, h = off_hz % H;
  auto kv_h = h / (H / H_KV);
  auto stride_q = H * D, stride_kv = H_KV * D;
  auto offs_d = tl::expand_dims(tl::arange(0, D), 0);
  auto rows = tl::expand_dims(pid_m * BLOCK_M + tl::arange(0, BLOCK_M), 1);  // [BLOCK_M, 1], in our slice
  auto first = (b * seqlen).to(tl::int64);                                   // (the sequence's first row here)
  auto q_tile = tl::load(q + (first * stride_q + h * D) + rows * stride_q + offs_d, rows < seqlen, 0.0f);
  auto qk_scale = sm_scale * 1.44269504f;  // 1/ln(2): exp(x) = exp2(x * log2(e))
  // A slice's key blocks [lo, hi): `masked` for those that need it (its last, partial block; our
  // own slice's diagonal block where causal; `pos`: the queries' positions for the mask).
  auto blocks = [&](Values state, const Tensor& k_base, const Tensor& v_base, const tl::Operand& lo,
                    const tl::Operand& hi, bool masked, bool causal, const Tensor& pos) {
    return detail::attention_blocks(std::move(state), q_tile, k_base, v_base, stride_kv, pos, seqlen, qk_scale, lo, hi,
                                    masked, causal, BLOCK_N, dtype);
  };
  auto whole = tl::multiple_of(seqlen / BLOCK_N * BLOCK_N, BLOCK_N);  // (a slice's whole blocks)
  Values state = {tl::full({BLOCK_M}, -INFINITY, tl::float32), tl::zeros({BLOCK_M}, tl::float32),
                  tl::zeros({BLOCK_M, D}, tl::float32)};
  // The slices in one loop, each once its word is here (its two loops of key blocks are then the
  // kernel's only rings, which share their buffers: three stages fit). j = 0 our own slice (every
  // row sees its key 0 in the first block it visits: m_i is finite after it), then the rank
  // before us (its slice comes first: each rank sends to the next rank first), and on: where
  // causal, the ranks before us alone, whose every key comes before our queries (the mask's row
  // positions moved a slice on keep them all), and our own up to the diagonal block, masked.
  auto peers = CAUSAL ? me : n - 1;
  state = tl::for_range(0, peers + 1, 1, std::move(state), [&](Tensor j, Values st) {
    auto r = tl::maximum(me - j + n, 0) % n;  // (said to be >= 0, as TMA's coordinates must be)
    auto here = shmem::signal_wait_until(flags + r, shmem::Cmp::ge, call);
    auto chunk = ((r * batch) * seqlen).to(tl::int64) * stride_kv + first * stride_kv + kv_h * D;
    auto k_r = tl::Ptr<T>(dist::consume_token(k_all, here).value()) + chunk;
    auto v_r = tl::Ptr<T>(dist::consume_token(v_all, here).value()) + chunk;
    if (CAUSAL == 0) {
      st = blocks(std::move(st), k_r, v_r, 0, whole, false, false, rows);
      return blocks(std::move(st), k_r, v_r, whole, seqlen, true, false, rows);
    }
    auto own = j == 0;
    auto unmasked = tl::multiple_of(tl::where(own, pid_m * BLOCK_M, whole), BLOCK_N);
    auto end = tl::where(own, tl::minimum((pid_m + 1) * BLOCK_M, seqlen), seqlen);
    st = blocks(std::move(st), k_r, v_r, 0, unmasked, false, false, rows);
    return blocks(std::move(st), k_r, v_r, unmasked, end, true, true, rows + tl::where(own, 0, seqlen));
  });
  auto out = state[2] / tl::expand_dims(state[1], 1);
  tl::store(o + (first * stride_q + h * D) + rows * stride_q + offs_d, out.to(dtype), rows < seqlen);
  // Causal: the slices of the ranks after us are not read, but their arrival is waited for (by
  // one program), so that the run ends only once every peer has begun this call: the peers'
  // next-but-one call writes into the buffer this one reads (the protocol, above; without it
  // rank 0, which waits for nobody, could run two calls ahead into a buffer still being read).
  if (CAUSAL)
    tl::if_then((pid_m == 0) & (off_hz == 0), [&] {
      tl::for_range(me + 1, n, 1, [&](Tensor r) { shmem::signal_wait_until(flags + r, shmem::Cmp::ge, call); });
    });
}

const std::vector<std::string> kParams = {"q",    "k_all", "v_all",    "o",        "flags",   "batch",   "seqlen", "H",
                                          "H_KV", "call",  "sm_scale", "HEAD_DIM", "BLOCK_M", "BLOCK_N", "CAUSAL"};
const Constants kDefaults = {{"HEAD_DIM", 128}, {"BLOCK_M", 128}, {"BLOCK_N", 64}, {"CAUSAL", 1}};
}  // namespace

const KernelDef& sp_ag_attention_kernel(ir::DType dtype) {
  static const KernelDef bf16_def =
      KernelDef("sp_ag_attention", sp_ag_attention<bf16>, kParams, kDefaults).do_not_specialize({"call"});
  static const KernelDef f16_def =
      KernelDef("sp_ag_attention_f16", sp_ag_attention<f16>, kParams, kDefaults).do_not_specialize({"call"});
  if (dtype == ir::DType::bf16) return bf16_def;
  if (dtype == ir::DType::f16) return f16_def;
  throw Error(str_cat("tiledist: ag_attention: no kernel for ", ir::dtype_name(dtype), " operands (bf16, f16)"));
}
TILEDIST_REGISTER(sp_ag_attention_kernel(ir::DType::bf16));
TILEDIST_REGISTER(sp_ag_attention_kernel(ir::DType::f16));

struct AgAttention::State {
  Target target;
  int rank = 0, ranks = 1, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t max_tokens = 0;  // a rank's, a run: max_batch * max_seqlen
  ir::DType dtype = ir::DType::bf16;
  bool causal = true;
  float scale = 0;
  AttentionConfig config;
  void* k_all = nullptr;     // symmetric [2, ranks, max_tokens, kv_heads, head_dim]
  void* v_all = nullptr;     // (the same)
  int32_t* flags = nullptr;  // symmetric [ranks]: the last call whose slice from rank r is here
  int32_t calls = 0;
  Kernel kernel;
  std::unique_ptr<detail::SideStream> copies;  // the copy engine's gather
  detail::RunStreams streams;
  bool gpu() const { return detail::on_gpu(target); }
  size_t half_bytes() const {
    return size_t(ranks) * size_t(max_tokens) * size_t(kv_heads) * size_t(head_dim) * ir::dtype_bytes(dtype);
  }
  ~State() {  // (here: the copies share the state, which goes with the last of them)
    streams.finish();
    if (copies) copies->finish();
    for (void* p : {static_cast<void*>(flags), v_all, k_all})
      if (p) detail::symm_release(target, p);
  }
};

AgAttention::AgAttention(const Target& target, int heads, int kv_heads, int head_dim, int64_t max_batch,
                         int64_t max_seqlen, ir::DType dtype, bool causal, float scale)
    : s_(std::make_shared<State>()) {
  State& s = *s_;
  const char* me = "tiledist: ag_attention: ";
  detail::check_attention_args(me, heads, kv_heads, head_dim, dtype, scale);
  s.rank = detail::world_rank(target), s.ranks = detail::world_ranks(target);
  detail::check_sp_capacity(me, "AgAttention", target, s.ranks, heads, kv_heads, head_dim, max_batch, max_seqlen);
  s.target = target, s.heads = heads, s.kv_heads = kv_heads, s.head_dim = head_dim, s.dtype = dtype;
  s.causal = causal, s.scale = scale > 0 ? scale : 1.0f / std::sqrt(float(head_dim));
  s.max_tokens = max_batch * max_seqlen;
  s.k_all = detail::symm_zeroed(target, std::max<size_t>(2 * s.half_bytes(), 4));
  s.v_all = detail::symm_zeroed(target, std::max<size_t>(2 * s.half_bytes(), 4));
  s.flags = static_cast<int32_t*>(detail::symm_zeroed(target, size_t(s.ranks) * 4));
  detail::symm_label(target, s.flags, size_t(s.ranks) * 4, {"AgAttention's signal words [ranks]", 4, [](int64_t i) {
                                                              return str_cat("the keys and values from rank ", i);
                                                            }});
  if (s.gpu()) s.copies = std::make_unique<detail::SideStream>();
  barrier_all();  // no rank signals before every rank has zeroed its words
  s.config = attention_config(target, head_dim, causal);
  // (warp specialized as the library's attention: the producer waits for each slice's word
  // before its copies, as the consumers do; codegen/passes/warp_specialization.cpp)
  s.kernel = compile(
      sp_ag_attention_kernel(dtype),
      {{"HEAD_DIM", head_dim}, {"BLOCK_M", s.config.block_m}, {"BLOCK_N", s.config.block_n}, {"CAUSAL", int(causal)}},
      target, s.config.options);
}

AgAttention::~AgAttention() = default;

template <AttentionOperand T>
void AgAttention::run(const T* q, const T* k, const T* v, T* o, int batch, int seqlen, const runtime::Stream* stream) {
  State& s = *s_;
  const char* me = "tiledist: ag_attention: ";
  if (dtype_of<T>() != s.dtype)
    throw Error(str_cat(me, "run with ", ir::dtype_name(dtype_of<T>()), " operands on an AgAttention made for ",
                        ir::dtype_name(s.dtype)));
  if (!detail::sp_run_ok(me, "AgAttention", s.rank, s.max_tokens, int64_t(std::max(s.heads, s.kv_heads)) * s.head_dim,
                         batch, seqlen, q, k, v, static_cast<const T*>(o)))
    return;  // (no tokens, on every rank alike: no call, nothing sent, no buffer taken)
  if (int64_t(batch) * s.heads > 65535)
    throw Error(
        str_cat(me, "batch * heads = ", int64_t(batch) * s.heads, ": at most 65535 (the grid's second dimension)"));
  const runtime::Stream* on = s.gpu() ? &s.streams.enter(stream, "ag_attention") : nullptr;
  const int32_t call = ++s.calls;
  const size_t slice = size_t(batch) * size_t(seqlen) * size_t(s.kv_heads) * size_t(s.head_dim) * sizeof(T);
  char* k_half = static_cast<char*>(s.k_all) + size_t(call % 2) * s.half_bytes();
  char* v_half = static_cast<char*>(s.v_all) + size_t(call % 2) * s.half_bytes();
  // (our slice's place in every rank's gathered buffer: [ranks, batch, seqlen, ...] as this run has them)
  const size_t ours = size_t(s.rank) * slice;
  if (on) {
    // The peers' copies start once k and v are ready and our last run is done (its half of the
    // gathered buffers is then free on every rank: the protocol, above).
    s.copies->fork(*on);
    // (our own slice into its slot here, where the kernel reads it, then our word here: on our
    // stream before the kernel, since a copy within a GPU may run on its SMs)
    runtime::copy_async(k_half + ours, k, slice, *on);
    runtime::copy_async(v_half + ours, v, slice, *on);
    runtime::write_value(s.flags + s.rank, static_cast<uint32_t>(call), *on);
    for (int i = 1; i < s.ranks; ++i) {  // the next rank first
      const int r = (s.rank + i) % s.ranks;
      const runtime::Stream& by = detail::shares_gpu(s.target, r) ? *on : s.copies->stream();
      if (!s.causal || r > s.rank) {  // (causal: a rank before us reads none of our keys, but waits for our word)
        runtime::copy_async(static_cast<char*>(detail::symm_on(s.target, k_half, r)) + ours, k, slice, by);
        runtime::copy_async(static_cast<char*>(detail::symm_on(s.target, v_half, r)) + ours, v, slice, by);
      }
      runtime::write_value(detail::symm_on(s.target, s.flags + s.rank, r), static_cast<uint32_t>(call), by);
    }
  } else {
    std::memcpy(k_half + ours, k, slice);
    std::memcpy(v_half + ours, v, slice);
    std::atomic_ref<int32_t>(s.flags[s.rank]).store(call, std::memory_order_release);
    for (int i = 1; i < s.ranks; ++i) {
      const int r = (s.rank + i) % s.ranks;
      if (!s.causal || r > s.rank) {
        std::memcpy(static_cast<char*>(detail::symm_on(s.target, k_half, r)) + ours, k, slice);
        std::memcpy(static_cast<char*>(detail::symm_on(s.target, v_half, r)) + ours, v, slice);
      }
      std::atomic_ref<int32_t>(*static_cast<int32_t*>(detail::symm_on(s.target, s.flags + s.rank, r)))
          .store(call, std::memory_order_release);
    }
  }
  detail::launch(s.kernel, on, Grid(tl::cdiv(int64_t(seqlen), s.config.block_m), int64_t(batch) * s.heads), q,
                 reinterpret_cast<const T*>(k_half), reinterpret_cast<const T*>(v_half), o,
                 static_cast<const int32_t*>(s.flags), batch, seqlen, s.heads, s.kv_heads, call, s.scale);
  if (on) {
    s.copies->join(*on);  // (the run ends once our copies have read k and v too)
    s.streams.leave(*on, stream);
  }
}
template void AgAttention::run(const bf16*, const bf16*, const bf16*, bf16*, int, int, const runtime::Stream*);
template void AgAttention::run(const f16*, const f16*, const f16*, f16*, int, int, const runtime::Stream*);

}  // namespace tiledist::kernels
