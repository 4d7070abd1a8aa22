// Sequence-parallel attention by all-to-all (kernels/sp_attention.h, DeepSpeed's Ulysses): each
// rank's tokens of every head go to the head group's rank (ulysses_move, IN), which then holds
// whole sequences for heads / ranks heads and runs the library's attention on them; the
// outputs go back to the tokens' ranks the same way (ulysses_move, BACK), and each rank copies
// what came into its o (ulysses_finish).
//
// ulysses_move: program (p, j) moves rows [p BR, (p + 1) BR) of the rank's B * S token rows to
// or from rank j's share, with stores into j's symmetric buffers; then counts itself done for j
// (an acq_rel atomic, sys scope: its stores released); the last of j's programs sets our word
// on j to the call (a release). Nothing in it waits. ulysses_finish (IN: one program; BACK: a
// program per block of rows) waits until every rank's word here is the call (an acquire), and
// for BACK copies the rows into o.
//
// Why the halves suffice (calls alternate between two of each buffer, words only grow): in
// call c a rank writes into a peer's half c % 2, which the peer last read in call c - 2 (its
// attention read the gathered rows, its finish the rows that came back); our call c starts
// after our call c - 1's finish had every peer's word for the rows that came back in c - 1,
// which each peer set after its own finish of c - 2 and attention of c - 1 (its stream's order).
// Nothing waits but the finishes, for moves that wait for nothing: no cycle.
#include <cmath>

#include "kernels/scratch.h"
#include "kernels/sp_attention.h"
#include "kernels/sp_run_check.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

constexpr int kIn = 0, kBack = 1;

/// IN: a (q), b (k), c (v) [B, S, n * wa | wb | wb] here, to da, db, dc [B, n S, wa | wb | wb] on
/// rank j, rows (b n + me) S + t. BACK: a [B, n S, wa] here (the attention's output for our head
/// group), rows (b n + j) S + t, to da [B, S, n * wa] on rank j at columns me * wa.
template <class T>
void ulysses_move(tl::Ptr<T> a, tl::Ptr<T> b, tl::Ptr<T> c, tl::Ptr<T> da, tl::Ptr<T> db, tl::Ptr<T> dc,
                  tl::Ptr<int32_t> done, tl::Ptr<int32_t> words, tl::Int rows, tl::Int S, tl::Int wa, tl::Int wb,
                  tl::Int call, tl::Const<int> DIR, tl::Const<int> BR, tl::Const<int> BW) {
  auto n = dist::num_ranks(), me = dist::rank();
  auto p = tl::program_id(0), j = tl::program_id(1);
  auto row = p * BR + tl::arange(0, BR);  // [BR]: token rows b S + t here
  auto in = tl::expand_dims(row < rows, 1);
  auto bb = row / tl::maximum(S, 1), t = row % tl::maximum(S, 1);
  auto col = tl::expand_dims(tl::arange(0, BW), 0);
  // Rows of width w from src (row offsets `from`, elements) to dst on rank j (`to`).
  auto move = [&](const tl::Ptr<T>& src, const Tensor& from, const tl::Ptr<T>& dst, const Tensor& to, const Tensor& w) {
    auto there = dist::symm_at(dst, j);
    tl::for_range(0, w, BW, [&](Tensor c0) {
      auto cc = c0 + col, m = in & (cc < w);
      tl::store(there + tl::expand_dims(to, 1) + cc, tl::load(src + tl::expand_dims(from, 1) + cc, m, 0.0f), m);
    });
  };
  if (DIR == kIn) {
    auto to = ((bb * n + me) * S + t).to(tl::int64);
    auto rw = row.to(tl::int64) * n;  // (a source row's elements, over its width's share)
    move(a, rw * wa + j * wa, da, to * wa, wa);
    move(b, rw * wb + j * wb, db, to * wb, wb);
    move(c, rw * wb + j * wb, dc, to * wb, wb);
  } else {
    auto from = ((bb * n + j) * S + t).to(tl::int64);
    move(a, from * wa, da, row.to(tl::int64) * n * wa + me * wa, wa);
  }
  // Counted done for j (releasing our stores); the last of j's programs sets our word there.
  auto before = tl::atomic_add(done + j, 1, {}, {"acq_rel", "sys"});
  tl::if_then(before == tl::num_programs(0) - 1, [&] {
    dist::notify(words + me, j, call);
    tl::atomic_xchg(done + j, 0, {}, {"relaxed", "gpu"});  // (for the next run: nobody adds now)
  });
}

/// Waits until every rank's word is `call`; BACK: then copies rows [p BR, ...) of src [rows,
/// width] into o.
template <class T>
void ulysses_finish(tl::Ptr<int32_t> words, tl::Ptr<T> src, tl::Ptr<T> o, tl::Int rows, tl::Int width, tl::Int call,
                    tl::Const<int> DIR, tl::Const<int> BR, tl::Const<int> BW) {
  auto here = dist::wait(words, dist::num_ranks(), dist::Scope::sys, dist::Semantic::acquire, call);
  if (DIR == kIn) return;
  auto from = tl::Ptr<T>(dist::consume_token(src, here).value());
  auto row = tl::expand_dims(tl::program_id(0) * BR + tl::arange(0, BR), 1).to(tl::int64);
  auto col = tl::expand_dims(tl::arange(0, BW), 0);
  tl::for_range(0, width, BW, [&](Tensor c0) {
    auto cc = c0 + col, m = (row < rows) & (cc < width);
    tl::store(o + row * width + cc, tl::load(from + row * width + cc, m, 0.0f), m);
  });
}

template <class T>
const KernelDef& move_def(const char* name) {
  static const KernelDef def =
      KernelDef(name, ulysses_move<T>,
                {"a", "b", "c", "da", "db", "dc", "done", "words", "rows", "S", "wa", "wb", "call", "DIR", "BR", "BW"},
                {{"DIR", kIn}, {"BR", 16}, {"BW", 128}})
          .do_not_specialize({"call"});
  return def;
}
template <class T>
const KernelDef& finish_def(const char* name) {
  static const KernelDef def =
      KernelDef(name, ulysses_finish<T>, {"words", "src", "o", "rows", "width", "call", "DIR", "BR", "BW"},
                {{"DIR", kBack}, {"BR", 16}, {"BW", 128}})
          .do_not_specialize({"call"});
  return def;
}
}  // namespace

const KernelDef& ulysses_move_kernel(ir::DType dtype) {
  if (dtype == ir::DType::f16) return move_def<f16>("ulysses_move_f16");
  if (dtype == ir::DType::bf16) return move_def<bf16>("ulysses_move");
  throw Error(str_cat("tiledist: ulysses_attention: no kernel for ", ir::dtype_name(dtype), " operands (bf16, f16)"));
}
const KernelDef& ulysses_finish_kernel(ir::DType dtype) {
  if (dtype == ir::DType::f16) return finish_def<f16>("ulysses_finish_f16");
  if (dtype == ir::DType::bf16) return finish_def<bf16>("ulysses_finish");
  throw Error(str_cat("tiledist: ulysses_attention: no kernel for ", ir::dtype_name(dtype), " operands (bf16, f16)"));
}
TILEDIST_REGISTER(ulysses_move_kernel(ir::DType::bf16));
TILEDIST_REGISTER(ulysses_move_kernel(ir::DType::f16));
TILEDIST_REGISTER(ulysses_finish_kernel(ir::DType::bf16));
TILEDIST_REGISTER(ulysses_finish_kernel(ir::DType::f16));

struct UlyssesAttention::State {
  Target target;
  int rank = 0, ranks = 1, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t max_tokens = 0;  // a rank's, a run
  ir::DType dtype = ir::DType::bf16;
  std::unique_ptr<Attention> attention;  // over heads / ranks heads, whole sequences
  // Symmetric, two halves each: the gathered q [B, n S, heads / n, D], k and v [.., kv_heads /
  // n, D]; the attention's output (as q); the rows that came back [B, S, heads, D]. (The
  // finishes wait for every rank, so one of each would do today; the halves are for the
  // overlap to come, where the moves run ahead of them. `out` is read here alone.)
  void *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *back = nullptr;
  int32_t* words = nullptr;       // symmetric [2, ranks]: IN's and BACK's last call from rank r
  detail::Scratch<int32_t> done;  // [2, ranks]: IN's and BACK's programs done for rank j
  int32_t calls = 0;
  Kernel move_in, move_back, finish_in, finish_back;
  detail::RunStreams streams;
  static constexpr int kRows = 16, kCols = 128;
  bool gpu() const { return detail::on_gpu(target); }
  /// A half's elements of a buffer of h heads (all ranks' shares).
  size_t elems(int h) const { return size_t(max_tokens) * size_t(h) * size_t(head_dim); }
  ~State() {
    streams.finish();
    for (void* p : {static_cast<void*>(words), back, out, v, k, q})
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
  if (max_batch < 0 || max_seqlen < 0)
    throw Error(str_cat(me, "max_batch = ", max_batch, ", max_seqlen = ", max_seqlen, ": not negative"));
  // (the attention checks the target)
  s.attention =
      std::make_unique<Attention>(target, heads / s.ranks, kv_heads / s.ranks, head_dim, dtype, causal, scale);
  s.target = target, s.heads = heads, s.kv_heads = kv_heads, s.head_dim = head_dim, s.dtype = dtype;
  // (32-bit: the rows over the ranks' tokens, and the attention's offsets within a sequence; in
  // double, which does not overflow)
  if (double(s.ranks) * double(max_batch) * double(max_seqlen) >= INT32_MAX)
    throw Error(str_cat(me, s.ranks, " ranks of ", max_batch, " x ", max_seqlen,
                        " tokens: the whole sequences' rows must number under 2^31"));
  if (double(s.ranks) * double(max_seqlen) * (std::max(heads, kv_heads) / s.ranks) * head_dim >= INT32_MAX)
    throw Error(str_cat(me, s.ranks, " ranks of ", max_seqlen, " tokens with ", std::max(heads, kv_heads) / s.ranks,
                        " heads a rank of ", head_dim, ": a whole sequence's elements must number under 2^31"));
  s.max_tokens = max_batch * max_seqlen;
  const size_t e = ir::dtype_bytes(dtype);
  auto buffer = [&](int h) { return detail::symm_zeroed(target, std::max<size_t>(2 * s.elems(h) * e, 4)); };
  s.q = buffer(heads), s.k = buffer(kv_heads), s.v = buffer(kv_heads), s.out = buffer(heads), s.back = buffer(heads);
  s.words = static_cast<int32_t*>(detail::symm_zeroed(target, 2 * size_t(s.ranks) * 4));
  detail::symm_label(target, s.words, 2 * size_t(s.ranks) * 4,
                     {"UlyssesAttention's signal words [2, ranks]", 4, [n = s.ranks](int64_t i) {
                        return str_cat(i / n == 0 ? "the tokens' rows from rank " : "the outputs from rank ", i % n);
                      }});
  s.done = detail::Scratch<int32_t>(target, 2 * size_t(s.ranks));
  barrier_all();  // no rank signals before every rank has zeroed its words
  const Constants blocks = {{"BR", State::kRows}, {"BW", State::kCols}};
  auto with = [&](int dir) {
    Constants c = blocks;
    c.insert_or_assign("DIR", ConstValue(dir));
    return c;
  };
  s.move_in = compile(ulysses_move_kernel(dtype), with(kIn), target);
  s.move_back = compile(ulysses_move_kernel(dtype), with(kBack), target);
  s.finish_in = compile(ulysses_finish_kernel(dtype), with(kIn), target);
  s.finish_back = compile(ulysses_finish_kernel(dtype), with(kBack), target);
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
  if (!detail::sp_run_ok(me, "UlyssesAttention", s.rank, s.max_tokens, batch, seqlen, q, k, v,
                         static_cast<const T*>(o)))
    return;  // (no tokens, on every rank alike: no call, nothing sent, no buffer taken)
  if (int64_t(batch) * (s.heads / s.ranks) > 65535)  // (before anything is launched: the attention's grid)
    throw Error(str_cat(me, "batch * heads / ranks = ", int64_t(batch) * (s.heads / s.ranks),
                        ": at most 65535 (the attention grid's second dimension)"));
  const int32_t call = ++s.calls;
  const int n = s.ranks, D = s.head_dim, rows = batch * seqlen;
  const size_t e = sizeof(T), half = size_t(call % 2);
  auto at = [&](void* p, int h) { return reinterpret_cast<T*>(static_cast<char*>(p) + half * s.elems(h) * e); };
  T *gq = at(s.q, s.heads), *gk = at(s.k, s.kv_heads), *gv = at(s.v, s.kv_heads);
  T *out = at(s.out, s.heads), *back = at(s.back, s.heads);
  const int wq = s.heads / n * D, wkv = s.kv_heads / n * D;  // (a head group's elements a row)
  const runtime::Stream* on = s.gpu() ? &s.streams.enter(stream) : nullptr;
  const Grid moves(tl::cdiv(int64_t(rows), State::kRows), n);
  detail::launch(s.move_in, on, moves, q, k, v, gq, gk, gv, s.done.data(), s.words, rows, seqlen, wq, wkv, call);
  detail::launch(s.finish_in, on, Grid(1), static_cast<const int32_t*>(s.words), static_cast<const T*>(back), o, 0, 0,
                 call);
  s.attention->run(static_cast<const T*>(gq), static_cast<const T*>(gk), static_cast<const T*>(gv), out, batch,
                   n * seqlen, on);
  detail::launch(s.move_back, on, moves, static_cast<const T*>(out), static_cast<const T*>(out),
                 static_cast<const T*>(out), back, back, back, s.done.data() + n, s.words + n, rows, seqlen, wq, 0,
                 call);
  detail::launch(s.finish_back, on, Grid(tl::cdiv(int64_t(rows), State::kRows)),
                 static_cast<const int32_t*>(s.words + n), static_cast<const T*>(back), o, rows, n * wq, call);
  if (on) s.streams.leave(*on, stream);
}
template void UlyssesAttention::run(const bf16*, const bf16*, const bf16*, bf16*, int, int, const runtime::Stream*);
template void UlyssesAttention::run(const f16*, const f16*, const f16*, f16*, int, int, const runtime::Stream*);

}  // namespace tiledist::kernels
