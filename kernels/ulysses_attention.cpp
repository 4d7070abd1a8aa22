// Sequence-parallel attention by all-to-all (kernels/sp_attention.h, DeepSpeed's Ulysses), with
// the communication under the attention both ways:
//
// 1. ulysses_pack (here, on the SMs): each head group's columns of our q, k and v rows, into a
//    slot of their own: our group's straight into the gathered buffers (slot `rank`), the
//    others' into a staging buffer, a slot a rank.
// 2. The copy engine sends each staged slot to its rank's gathered buffers (slot `rank` there),
//    then our word there (IN) says the call's tokens from us have come (the host's memcpy and
//    a release store on the CPU). Our own word is set here on our stream after the pack.
// 3. ulysses_attention: the attention over whole sequences for our heads / ranks heads,
//    reading the gathered slices where they lie ([ranks, B, S, ...]): a program takes a block
//    of one slice's queries (ours first) once that slice's word is here, then the keys of the
//    slices it attends (causal: those before it and its own), each once its word is here, so
//    that the kernel starts at once on our own tokens while the others' arrive. Each program
//    stores its output rows straight into their rank's `back` buffer (our group's columns of
//    [B, S, heads, D]); the last program of all (an acq_rel count, sys scope: every program's
//    stores released into it) sets our word on every rank (BACK).
// 4. ulysses_finish (one program) waits for every rank's BACK word; `back` is then copied into o.
//
// The protocol, as AgAttention's (calls alternate between two of each symmetric buffer, words
// only grow): in call c a rank writes into a peer's half c % 2 (the gathered slices by copy, the
// output rows by the kernel), which the peer last read in call c - 2 (its kernel the gathered
// slices, its copy into o the rows that came back). Our call c starts after our call c - 1's
// finish had every peer's BACK word of call c - 1, which each peer's kernel of call c - 1 set
// at its end, after the peer's call c - 2 was done (its stream's order). The kernel's waits
// are for copies that wait only for the sender's pack at its run's start (the copy engine: no
// SM needed on our GPU); every IN word is waited for by some program (every slice's queries are
// read), so no rank runs a call ahead of a peer still reading. A copy to a peer sharing our GPU
// runs on its SMs: it goes on our stream before our kernel, as in AgAttention; such a peer's
// pack and copies then need our GPU's SMs while our kernel may hold them all waiting, and come
// by the driver's time slices between the processes' contexts (as every kernel here that waits
// for a peer on the same GPU: under MPS they would not). The staging buffer is ours alone: the
// run ends once its copies are done.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>

#include "kernels/attention_tile.h"
#include "kernels/scratch.h"
#include "kernels/sp_attention.h"
#include "kernels/sp_run_check.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;
using tl::Values;

/// Program (p, j): rows [p BR, (p + 1) BR) of q [rows, n wq], k and v [rows, n wkv], head group
/// j's columns, to j's slot: own_* [rows, w] where j is us, else stage_* + j rows w.
template <class T>
void ulysses_pack(tl::Ptr<T> q, tl::Ptr<T> k, tl::Ptr<T> v, tl::Ptr<T> own_q, tl::Ptr<T> own_k, tl::Ptr<T> own_v,
                  tl::Ptr<T> stage_q, tl::Ptr<T> stage_k, tl::Ptr<T> stage_v, tl::Int rows, tl::Int wq, tl::Int wkv,
                  tl::Const<int> BR, tl::Const<int> BW) {
  auto n = dist::num_ranks(), me = dist::rank();
  auto p = tl::program_id(0), j = tl::program_id(1);
  auto row = tl::expand_dims(p * BR + tl::arange(0, BR), 1).to(tl::int64);  // [BR, 1]
  auto col = tl::expand_dims(tl::arange(0, BW), 0);
  auto pack = [&](const Tensor& src, const Tensor& dst, const Tensor& w) {
    tl::for_range(0, w, BW, [&](Tensor c0) {
      auto cc = c0 + col, m = (row < rows) & (cc < w);
      tl::store(dst + row * w + cc, tl::load(src + row * (n * w) + j * w + cc, m, 0.0f), m);
    });
  };
  tl::if_then(j == me, [&] {
    pack(q, own_q, wq);
    pack(k, own_k, wkv);
    pack(v, own_v, wkv);
  });
  tl::if_then(j != me, [&] {
    auto slot = j.to(tl::int64) * rows;
    pack(q, stage_q + slot * wq, wq);
    pack(k, stage_k + slot * wkv, wkv);
    pack(v, stage_v + slot * wkv, wkv);
  });
}

/// The attention over the gathered slices: q_all [n, B, S, HQ, D], k_all and v_all [n, B, S,
/// HKV, D] (rank r's tokens at r, once words[r] >= call); program (i m-blocks + m, b HQ + h)
/// computes a block of query rows of slice r = (me - i) % n, sequence b, head h, and stores
/// them into rank r's back [B, S, H, D] at head me HQ + h; the last program sets words[n + me]
/// on every rank to the call.
template <class T>
void ulysses_attention(tl::Ptr<T> q_all, tl::Ptr<T> k_all, tl::Ptr<T> v_all, tl::Ptr<T> back, tl::Ptr<int32_t> words,
                       tl::Ptr<int32_t> done, tl::Int batch, tl::Int seqlen, tl::Int H, tl::Int HQ, tl::Int HKV,
                       tl::Int call, tl::Float sm_scale, tl::Const<int> HEAD_DIM, tl::Const<int> BLOCK_M,
                       tl::Const<int> BLOCK_N, tl::Const<int> CAUSAL) {
  const int D = HEAD_DIM;
  const tl::DType dtype = dtype_of<T>();
  auto n = dist::num_ranks(), me = dist::rank();
  auto blocks_m = tl::cdiv(seqlen, BLOCK_M);
  // Slices in the order they come (ours, then the rank before us: each rank sends to the next
  // first; the grid hands out x fastest, so a wave holds blocks of the next slice too); causal,
  // a slice's query blocks last first (the most keys of the slice's programs first).
  auto i = tl::program_id(0) / blocks_m, x = tl::program_id(0) % blocks_m;
  auto pid_m = CAUSAL ? blocks_m - 1 - x : x;
  auto r = tl::maximum(me - i + n, 0) % n;  // (the queries' slice; said to be >= 0, as TMA's coordinates must be)
  auto b = tl::program_id(1) / HQ, h = tl::program_id(1) % HQ;
  auto kv_h = h / (HQ / HKV);
  auto stride_q = HQ * D, stride_kv = HKV * D;
  auto offs_d = tl::expand_dims(tl::arange(0, D), 0);
  auto rows = tl::expand_dims(pid_m * BLOCK_M + tl::arange(0, BLOCK_M), 1);  // [BLOCK_M, 1], in slice r
  auto qk_scale = sm_scale * 1.44269504f;                                    // 1/ln(2): exp2
  // (slice s's row 0 of sequence b: [n, B, S] rows)
  auto first = [&](const Tensor& s) { return ((s * batch + b) * seqlen).to(tl::int64); };
  auto arrived = shmem::signal_wait_until(words + r, shmem::Cmp::ge, call);
  auto q_r = tl::Ptr<T>(dist::consume_token(q_all, arrived).value()) + (first(r) * stride_q + h * D);
  auto q_tile = tl::load(q_r + rows * stride_q + offs_d, rows < seqlen, 0.0f);
  // Key blocks [lo, hi) of slice s (`pos`: the queries' positions for a causal mask).
  auto blocks = [&](Values state, const Tensor& s, const Tensor& token, const tl::Operand& lo, const tl::Operand& hi,
                    bool masked, bool causal, std::optional<Tensor> pos = std::nullopt) {
    auto at = first(s) * stride_kv + kv_h * D;
    auto k_s = tl::Ptr<T>(dist::consume_token(k_all, token).value()) + at;
    auto v_s = tl::Ptr<T>(dist::consume_token(v_all, token).value()) + at;
    return detail::attention_blocks(std::move(state), q_tile, k_s, v_s, stride_kv, pos.value_or(rows), seqlen, qk_scale,
                                    lo, hi, masked, causal, BLOCK_N, dtype);
  };
  auto whole = tl::multiple_of(seqlen / BLOCK_N * BLOCK_N, BLOCK_N);  // (a slice's whole blocks)
  Values state = {tl::full({BLOCK_M}, -INFINITY, tl::float32), tl::zeros({BLOCK_M}, tl::float32),
                  tl::zeros({BLOCK_M, D}, tl::float32)};
  // The slices in one loop (its two loops of key blocks are then the kernel's only rings, which
  // share their buffers: three stages fit): j = 0 the queries' own slice (its keys came with
  // them; every row sees the slice's key 0 in the first block it visits), then the one before
  // it, and on; causal, those before r alone (every key of them comes before the queries: the
  // mask's row positions moved a slice on keep them all) and r's own up to the diagonal block.
  auto others = CAUSAL ? r : n - 1;
  state = tl::for_range(0, others + 1, 1, std::move(state), [&](Tensor j, Values st) {
    auto s = tl::maximum(r - j + n, 0) % n;
    auto here = shmem::signal_wait_until(words + s, shmem::Cmp::ge, call);
    if (CAUSAL == 0) {
      st = blocks(std::move(st), s, here, 0, whole, false, false);
      return blocks(std::move(st), s, here, whole, seqlen, true, false);
    }
    auto own = j == 0;
    auto unmasked = tl::multiple_of(tl::where(own, pid_m * BLOCK_M, whole), BLOCK_N);
    auto end = tl::where(own, tl::minimum((pid_m + 1) * BLOCK_M, seqlen), seqlen);
    st = blocks(std::move(st), s, here, 0, unmasked, false, false, rows);
    return blocks(std::move(st), s, here, unmasked, end, true, true, rows + tl::where(own, 0, seqlen));
  });
  auto out = state[2] / tl::expand_dims(state[1], 1);
  auto there = dist::symm_at(back, r) + (((b * seqlen).to(tl::int64) * H + me * HQ + h) * D);
  tl::store(there + rows * (H * D) + offs_d, out.to(dtype), rows < seqlen);
  // Counted done (releasing our stores); the last program of all sets our BACK word everywhere.
  auto before = tl::atomic_add(done, 1, {}, {"acq_rel", "sys"});
  tl::if_then(before == tl::num_programs(0) * tl::num_programs(1) - 1, [&] {
    tl::for_range(0, n, 1, [&](Tensor j) { dist::notify(words + n + me, j, call); });
    tl::atomic_xchg(done, 0, {}, {"relaxed", "gpu"});  // (for the next run: nobody adds now)
  });
}

/// Waits until every rank's word (words [ranks]) is `call`.
void ulysses_finish(tl::Ptr<int32_t> words, tl::Int call) {
  dist::wait(words, dist::num_ranks(), dist::Scope::sys, dist::Semantic::acquire, call);
}

template <class T>
const KernelDef& pack_def(const char* name) {
  static const KernelDef def = KernelDef(
      name, ulysses_pack<T>,
      {"q", "k", "v", "own_q", "own_k", "own_v", "stage_q", "stage_k", "stage_v", "rows", "wq", "wkv", "BR", "BW"},
      {{"BR", 16}, {"BW", 128}});
  return def;
}
template <class T>
const KernelDef& attention_def(const char* name) {
  static const KernelDef def = KernelDef(name, ulysses_attention<T>,
                                         {"q_all", "k_all", "v_all", "back", "words", "done", "batch", "seqlen", "H",
                                          "HQ", "HKV", "call", "sm_scale", "HEAD_DIM", "BLOCK_M", "BLOCK_N", "CAUSAL"},
                                         {{"HEAD_DIM", 128}, {"BLOCK_M", 128}, {"BLOCK_N", 64}, {"CAUSAL", 1}})
                                   .do_not_specialize({"call"});
  return def;
}
const KernelDef& pick(ir::DType dtype, const KernelDef& bf16_def, const KernelDef& f16_def) {
  if (dtype == ir::DType::f16) return f16_def;
  if (dtype == ir::DType::bf16) return bf16_def;
  throw Error(str_cat("tiledist: ulysses_attention: no kernel for ", ir::dtype_name(dtype), " operands (bf16, f16)"));
}
}  // namespace

const KernelDef& ulysses_pack_kernel(ir::DType dtype) {
  return pick(dtype, pack_def<bf16>("ulysses_pack"), pack_def<f16>("ulysses_pack_f16"));
}
const KernelDef& ulysses_attention_kernel(ir::DType dtype) {
  return pick(dtype, attention_def<bf16>("ulysses_attention"), attention_def<f16>("ulysses_attention_f16"));
}
const KernelDef& ulysses_finish_kernel() {
  static const KernelDef def =
      KernelDef("ulysses_finish", ulysses_finish, {"words", "call"}, {}).do_not_specialize({"call"});
  return def;
}
TILEDIST_REGISTER(ulysses_pack_kernel(ir::DType::bf16));
TILEDIST_REGISTER(ulysses_pack_kernel(ir::DType::f16));
TILEDIST_REGISTER(ulysses_attention_kernel(ir::DType::bf16));
TILEDIST_REGISTER(ulysses_attention_kernel(ir::DType::f16));
TILEDIST_REGISTER(ulysses_finish_kernel());

struct UlyssesAttention::State {
  Target target;
  int rank = 0, ranks = 1, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t max_tokens = 0;  // a rank's, a run
  ir::DType dtype = ir::DType::bf16;
  float scale = 0;
  AttentionConfig config;
  // Symmetric, two halves each: the gathered q [ranks, B, S, heads / ranks, D], k and v [..,
  // kv_heads / ranks, D]; the output rows that came back [B, S, heads, D].
  void *q = nullptr, *k = nullptr, *v = nullptr, *back = nullptr;
  int32_t* words = nullptr;       // symmetric [2, ranks]: the last call whose tokens (IN), outputs (BACK) came from r
  detail::Scratch<int32_t> done;  // the kernel's programs done (a count)
  // q, k, v, each [ranks, rows, .. / ranks heads, D] (a run's rows), each rank's share to send (ours unused)
  detail::Scratch<uint8_t> stage;
  int32_t calls = 0;
  Kernel pack, attention, finish;
  std::unique_ptr<detail::SideStream> copies;  // the copy engine's sends
  detail::RunStreams streams;
  static constexpr int kRows = 16, kCols = 128;
  bool gpu() const { return detail::on_gpu(target); }
  /// A half's elements of a buffer of h heads (all ranks' shares).
  size_t elems(int h) const { return size_t(max_tokens) * size_t(h) * size_t(head_dim); }
  ~State() {  // (here: the copies share the state, which goes with the last of them)
    streams.finish();
    if (copies) copies->finish();
    for (void* p : {static_cast<void*>(words), back, v, k, q})
      if (p) detail::symm_release(target, p);
  }
};

UlyssesAttention::UlyssesAttention(const Target& target, int heads, int kv_heads, int head_dim, int64_t max_batch,
                                   int64_t max_seqlen, ir::DType dtype, bool causal, float scale)
    : s_(std::make_shared<State>()) {
  State& s = *s_;
  const char* me = "tiledist: ulysses_attention: ";
  s.rank = detail::world_rank(target), s.ranks = detail::world_ranks(target);
  detail::check_attention_args(me, heads, kv_heads, head_dim, dtype, scale);
  if (heads % s.ranks || kv_heads % s.ranks)
    throw Error(str_cat(me, "heads = ", heads, ", kv_heads = ", kv_heads, " over ", s.ranks,
                        " ranks: both multiples of the ranks (each rank takes a share of the heads)"));
  detail::check_sp_capacity(me, "UlyssesAttention", target, s.ranks, heads, kv_heads, head_dim, max_batch, max_seqlen);
  s.target = target, s.heads = heads, s.kv_heads = kv_heads, s.head_dim = head_dim, s.dtype = dtype;
  s.scale = scale > 0 ? scale : 1.0f / std::sqrt(float(head_dim));
  s.max_tokens = max_batch * max_seqlen;
  const size_t e = ir::dtype_bytes(dtype);
  auto buffer = [&](int h) { return detail::symm_zeroed(target, std::max<size_t>(2 * s.elems(h) * e, 4)); };
  s.q = buffer(heads), s.k = buffer(kv_heads), s.v = buffer(kv_heads), s.back = buffer(heads);
  s.words = static_cast<int32_t*>(detail::symm_zeroed(target, 2 * size_t(s.ranks) * 4));
  detail::symm_label(target, s.words, 2 * size_t(s.ranks) * 4,
                     {"UlyssesAttention's signal words [2, ranks]", 4, [n = s.ranks](int64_t i) {
                        return str_cat(i / n == 0 ? "the tokens' rows from rank " : "the outputs from rank ", i % n);
                      }});
  s.done = detail::Scratch<int32_t>(target, 1);
  s.stage = detail::Scratch<uint8_t>(target, (s.elems(heads) + 2 * s.elems(kv_heads)) * e);
  if (s.gpu()) s.copies = std::make_unique<detail::SideStream>();
  barrier_all();  // no rank signals before every rank has zeroed its words
  s.config = attention_config(target, head_dim, causal);
  // (warp specialized as the library's attention: its producer waits for each slice's word too)
  s.pack = compile(ulysses_pack_kernel(dtype), {{"BR", State::kRows}, {"BW", State::kCols}}, target);
  s.attention = compile(
      ulysses_attention_kernel(dtype),
      {{"HEAD_DIM", head_dim}, {"BLOCK_M", s.config.block_m}, {"BLOCK_N", s.config.block_n}, {"CAUSAL", int(causal)}},
      target, s.config.options);
  s.finish = compile(ulysses_finish_kernel(), {}, target);
}

UlyssesAttention::~UlyssesAttention() = default;

template <AttentionOperand T>
void UlyssesAttention::run(const T* q, const T* k, const T* v, T* o, int batch, int seqlen,
                           const runtime::Stream* stream) {
  State& s = *s_;
  const char* me = "tiledist: ulysses_attention: ";
  if (dtype_of<T>() != s.dtype)
    throw Error(str_cat(me, "run with ", ir::dtype_name(dtype_of<T>()), " operands on a UlyssesAttention made for ",
                        ir::dtype_name(s.dtype)));
  if (!detail::sp_run_ok(me, "UlyssesAttention", s.rank, s.max_tokens,
                         int64_t(std::max(s.heads, s.kv_heads)) * s.head_dim, batch, seqlen, q, k, v,
                         static_cast<const T*>(o)))
    return;  // (no tokens, on every rank alike: no call, nothing sent, no buffer taken)
  const int n = s.ranks, D = s.head_dim, hq = s.heads / n, hkv = s.kv_heads / n;
  if (int64_t(batch) * hq > 65535)  // (before anything is launched: the kernel's grid)
    throw Error(str_cat(me, "batch * heads / ranks = ", int64_t(batch) * hq,
                        ": at most 65535 (the attention grid's second dimension)"));
  const runtime::Stream* on = s.gpu() ? &s.streams.enter(stream, "ulysses_attention") : nullptr;
  const int32_t call = ++s.calls;
  const int rows = batch * seqlen, wq = hq * D, wkv = hkv * D;  // (a head group's elements a row)
  const size_t e = sizeof(T), half = size_t(call % 2);
  auto at = [&](void* p, int h) { return reinterpret_cast<T*>(static_cast<char*>(p) + half * s.elems(h) * e); };
  T *gq = at(s.q, s.heads), *gk = at(s.k, s.kv_heads), *gv = at(s.v, s.kv_heads), *back = at(s.back, s.heads);
  T* stage_q = reinterpret_cast<T*>(s.stage.data());
  T *stage_k = stage_q + s.elems(s.heads), *stage_v = stage_k + s.elems(s.kv_heads);
  // (a rank's slot of each gathered buffer, and of the staging one: this run's rows)
  const size_t slot_q = size_t(rows) * wq, slot_kv = size_t(rows) * wkv;
  detail::launch(s.pack, on, Grid(tl::cdiv(int64_t(rows), State::kRows), n), q, k, v, gq + s.rank * slot_q,
                 gk + s.rank * slot_kv, gv + s.rank * slot_kv, stage_q, stage_k, stage_v, rows, wq, wkv);
  // Each peer's slots, the next rank first, then its word.
  struct Part {
    T *to, *from;
    size_t elems;
  };
  auto parts = [&](int r) {
    const size_t ours_q = size_t(s.rank) * slot_q, ours_kv = size_t(s.rank) * slot_kv;
    auto there = [&](T* p) { return static_cast<T*>(detail::symm_on(s.target, p, r)); };
    return std::array<Part, 3>{Part{there(gq) + ours_q, stage_q + r * slot_q, slot_q},
                               Part{there(gk) + ours_kv, stage_k + r * slot_kv, slot_kv},
                               Part{there(gv) + ours_kv, stage_v + r * slot_kv, slot_kv}};
  };
  auto word = [&](int r, int dir) {
    return static_cast<int32_t*>(detail::symm_on(s.target, s.words + dir * n + s.rank, r));
  };
  if (on) {
    runtime::write_value(s.words + s.rank, static_cast<uint32_t>(call), *on);  // (our own slot: packed)
    s.copies->fork(*on);
    for (int i = 1; i < n; ++i) {
      const int r = (s.rank + i) % n;
      const runtime::Stream& by = detail::shares_gpu(s.target, r) ? *on : s.copies->stream();
      for (const Part& p : parts(r)) runtime::copy_async(p.to, p.from, p.elems * e, by);
      runtime::write_value(word(r, 0), static_cast<uint32_t>(call), by);
    }
  } else {
    std::atomic_ref<int32_t>(s.words[s.rank]).store(call, std::memory_order_release);
    for (int i = 1; i < n; ++i) {
      const int r = (s.rank + i) % n;
      for (const Part& p : parts(r)) std::memcpy(p.to, p.from, p.elems * e);
      std::atomic_ref<int32_t>(*word(r, 0)).store(call, std::memory_order_release);
    }
  }
  const Grid grid(tl::cdiv(int64_t(seqlen), s.config.block_m) * n, int64_t(batch) * hq);
  detail::launch(s.attention, on, grid, static_cast<const T*>(gq), static_cast<const T*>(gk), static_cast<const T*>(gv),
                 back, static_cast<const int32_t*>(s.words), s.done.data(), batch, seqlen, s.heads, hq, hkv, call,
                 s.scale);
  detail::launch(s.finish, on, Grid(1), static_cast<const int32_t*>(s.words + n), call);
  if (on) {
    runtime::copy_async(o, back, size_t(rows) * s.heads * D * e, *on);
    s.copies->join(*on);  // (the run ends once our copies have read the staging buffer)
    s.streams.leave(*on, stream);
  } else {
    std::memcpy(o, back, size_t(rows) * s.heads * D * e);
  }
}
template void UlyssesAttention::run(const bf16*, const bf16*, const bf16*, bf16*, int, int, const runtime::Stream*);
template void UlyssesAttention::run(const f16*, const f16*, const f16*, f16*, int, int, const runtime::Stream*);

}  // namespace tiledist::kernels
