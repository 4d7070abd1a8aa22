// One-shot collectives through a symmetric staging area, on the host world (CPU) or the GPU
// world alike. Programs form a grid (P, ranks): program (b, p) pushes slice b of what rank p
// needs into rank p's staging row for this rank, chunk by chunk (putmem + a signal; to itself
// only the signal), and after pushing chunk j finishes part p of chunk j - 1 of slice b, once
// every rank's chunk j - 1 has arrived: copying the rows (all-gather) or summing them in rank
// order (reduce-scatter, all-reduce: the same order on every rank, so every rank gets the same
// bits), its own row read from its input. With SPLIT the roles are apart instead: the programs
// for peers only push, chunk after chunk, and the program for this rank finishes each chunk
// whole as it arrives (the links never wait for a sum). The two-shot all-reduce is a
// reduce-scatter and an all-gather of the sums.
//
// Reuse without a barrier: calls alternate between two staging halves, and signal words only
// grow (call << 20 | chunks received). A call's kernel ends only once every rank's chunks of
// the call have arrived, so a rank writes a peer's half of call k+1 only after it has received
// that peer's pushes of call k, which the peer made after finishing call k-1, the last reader
// of that half.
//
// Progress needs every program of a call resident at once (a program waits for chunks that
// the peers' programs of its slice push, and those may wait for ours): a call's grid is at most
// one program per SM (SMs / ranks slices per destination), each of 16 warps, which an SM always
// holds; on the host, programs are fibers. Runs are queued in one order per rank
// (detail::RunOrder), so no other communicating kernel of the library holds SMs meanwhile.
#include <optional>
#include <type_traits>

#include "kernels/kernels.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

/// f32 or bf16 elements (sums of bf16 are taken in f32 and rounded once).
template <class T>
void push_collective(tl::Ptr<T> in, tl::Ptr<T> staging, tl::Ptr<int64_t> flags, tl::Ptr<T> out, tl::Int count,
                     tl::Int in_stride, tl::Int out_stride, tl::Int64 call, tl::Int slots, tl::Int guard,
                     tl::Const<int> BLOCK, tl::Const<int> REDUCE, tl::Const<int> CHUNK, tl::Const<int> SPLIT) {
  constexpr int kSize = sizeof(T), kAlign = 16 / kSize;  // bytes per element, elements per 16 bytes
  const auto dtype = kSize == 4 ? tl::float32 : tl::bfloat16;
  auto me = dist::rank(), n = dist::num_ranks();
  auto b = tl::program_id(0), nb = tl::num_programs(0), p = tl::program_id(1);
  // ceil(x / parts), rounded up to whole 16 bytes: slices of the piece, parts of a chunk.
  auto share = [&](const Tensor& x, const Tensor& parts) {
    return ((x + parts - 1) / parts + kAlign - 1) / kAlign * kAlign;
  };
  auto per = share(count, nb);
  auto lo = b * per;
  auto len = tl::maximum(tl::minimum(count - lo, per), 0);
  auto chunks = (len + CHUNK - 1) / CHUNK;
  // Signal words hold call << 20 | chunks of slice b received, one word per (sender, slice):
  // set, not added, by the one program that pushes that slice here, so they only grow.
  auto base = call * (int64_t(1) << 20);
  auto arrived = [&](const Tensor& j) { return base + j.to(tl::int64) + 1; };  // chunk j of this call
  auto chunk_at = [&](const Tensor& j) { return lo + j * CHUNK; };
  auto chunk_len = [&](const Tensor& j) { return tl::minimum(lo + len - chunk_at(j), int(CHUNK)); };
  // Chunk j of slice b goes to rank p (only the signal where p is this rank).
  auto push = [&](const Tensor& j) {
    auto at = chunk_at(j);
    auto bytes = tl::where(p == me, 0, chunk_len(j)).to(tl::int64) * kSize;
    tl::profile("put",
                [&] {
                  shmem::putmem_signal_nbi_block(staging + (me * count + at).to(tl::int64),
                                                 in + (p * in_stride + at).to(tl::int64), bytes, flags + me * slots + b,
                                                 arrived(j), shmem::SIGNAL_SET, p);
                },
                {p, b});
    // In place (guard): the sums overwrite the input, so this rank's finishers wait until
    // every program has read its chunk: pushed[p][b], after the signal words, set here.
    tl::if_then((guard != 0) & (p != me), [&] {
      tl::atomic_xchg(flags + (n * slots + p * slots + b).to(tl::int64), arrived(j), {}, {"release", "gpu"});
    });
  };
  // Part p of chunk j, once every rank's chunk j has arrived: copied out (all-gather) or summed
  // in rank order (reduce-scatter, all-reduce).
  auto own = in + (me * in_stride).to(tl::int64);
  auto finish = [&](const Tensor& j) {
    auto at = chunk_at(j), clen = chunk_len(j);
    auto part = SPLIT ? clen : share(clen, n);
    auto first = SPLIT ? at : at + p * part;
    auto end = tl::minimum(first + part, at + clen);
    tl::if_then(first < end, [&] {
      Tensor token;
      tl::profile("wait",
                  [&] {
                    token = tl::for_range(0, n, 1, tl::scalar(0, tl::int64), [&](Tensor r, Tensor) {
                      return shmem::signal_wait_until(flags + r * slots + b, shmem::Cmp::ge, arrived(j));
                    });
                  },
                  {p, b});
      tl::if_then(guard != 0, [&] {
        tl::for_range(0, n, 1, [&](Tensor r) {
          tl::if_then(r != me, [&] {
            shmem::signal_wait_until(flags + (n * slots + r * slots + b).to(tl::int64), shmem::Cmp::ge, arrived(j));
          });
        });
      });
      auto rows = dist::consume_token(staging, token);
      // [first, whole) in 16-byte runs, whose masks the compiler can prove uniform per run
      // (16-byte loads and stores); then the ragged end (the piece's last, unaligned elements).
      // (Slices, chunks and parts are all multiples of 16 bytes, so `first` is one too.)
      auto start = tl::multiple_of(first, kAlign);
      auto whole = tl::multiple_of(tl::maximum(end / kAlign * kAlign, first), kAlign);
      auto span = [&](const Tensor& from, const Tensor& to, int block) {
        tl::for_range(from, to, block, [&](Tensor off) {
          auto o = off + tl::arange(0, block);
          auto m = o < to;
          // Rank r's elements: from its staging row, or from the input for this rank's own.
          auto row = [&](const Tensor& r) {
            auto mine = r == me;
            return tl::where(mine, tl::load(own + o, m & mine, 0.0f),
                             tl::load(rows + (r * count).to(tl::int64) + o, m & !mine, 0.0f));
          };
          if (REDUCE) {
            auto sum = tl::for_range(0, n, 1, tl::zeros({block}, tl::float32),
                                     [&](Tensor r, Tensor acc) { return acc + row(r).to(tl::float32); });
            tl::store(out + o, sum.to(dtype), m);
          } else {
            tl::for_range(0, n, 1, [&](Tensor r) { tl::store(out + (r * out_stride).to(tl::int64) + o, row(r), m); });
          }
        });
      };
      span(start, whole, BLOCK);
      span(whole, end, kAlign);
    });
  };
  // A pipeline: push chunk j while the chunk before it is finished, so that the links and the
  // local memory work at once.
  if (SPLIT) {
    // Roles: the programs for peers push every chunk, one after another; the program for this
    // rank signals its own chunks and finishes every chunk whole as it arrives.
    tl::if_then(p != me, [&] { tl::for_range(0, chunks, 1, [&](Tensor j) { push(j); }); });
    tl::if_then(p == me, [&] {
      tl::for_range(0, chunks, 1, [&](Tensor j) { push(j); });
      tl::for_range(0, chunks, 1, [&](Tensor j) { finish(j); });
    });
    return;
  }
  tl::for_range(0, chunks, 1, [&](Tensor j) {
    push(j);
    tl::if_then(j > 0, [&] { finish(j - 1); });
  });
  tl::if_then(chunks > 0, [&] { finish(chunks - 1); });
}

const std::vector<std::string> kParams = {"in",   "staging", "flags", "out",   "count",  "in_stride", "out_stride",
                                          "call", "slots",   "guard", "BLOCK", "REDUCE", "CHUNK",     "SPLIT"};

template <class T>
KernelDef collective_def(const std::string& name, int reduce) {
  const int chunk = 256 * 1024 / int(sizeof(T));  // 256 KiB (bench/RESULTS.md)
  const int block = 8192 / int(sizeof(T));        // 16 bytes per thread of 16 warps
  return KernelDef(name, push_collective<T>, kParams,
                   {{"BLOCK", block}, {"REDUCE", reduce}, {"CHUNK", chunk}, {"SPLIT", 0}})
      .do_not_specialize({"call", "slots", "guard"});
}
ir::DType collective_dtype(ir::DType dtype) {
  if (dtype != ir::DType::f32 && dtype != ir::DType::bf16)
    throw Error(str_cat("tiledist: collectives take f32 or bf16, not ", ir::dtype_name(dtype)));
  return dtype;
}
}  // namespace

const KernelDef& all_gather_kernel(ir::DType dtype) {
  static const KernelDef f32 = collective_def<float>("all_gather", 0), b16 = collective_def<bf16>("all_gather_bf16", 0);
  return collective_dtype(dtype) == ir::DType::f32 ? f32 : b16;
}
const KernelDef& reduce_scatter_kernel(ir::DType dtype) {
  static const KernelDef f32 = collective_def<float>("reduce_scatter", 1),
                         b16 = collective_def<bf16>("reduce_scatter_bf16", 1);
  return collective_dtype(dtype) == ir::DType::f32 ? f32 : b16;
}
const KernelDef& all_reduce_kernel(ir::DType dtype) {
  static const KernelDef f32 = collective_def<float>("all_reduce", 1), b16 = collective_def<bf16>("all_reduce_bf16", 1);
  return collective_dtype(dtype) == ir::DType::f32 ? f32 : b16;
}
TILEDIST_REGISTER(all_gather_kernel(ir::DType::f32));
TILEDIST_REGISTER(reduce_scatter_kernel(ir::DType::f32));
TILEDIST_REGISTER(all_reduce_kernel(ir::DType::f32));
TILEDIST_REGISTER(all_gather_kernel(ir::DType::bf16));
TILEDIST_REGISTER(reduce_scatter_kernel(ir::DType::bf16));
TILEDIST_REGISTER(all_reduce_kernel(ir::DType::bf16));

struct Collectives::State {
  Target target;
  int ranks = 1;
  size_t row_bytes = 0;  // per rank row of a staging half (a multiple of 16)
  char* staging = nullptr;
  // flags[r * programs + b]: call << 20 | chunks of slice b rank r has sent us. The stride is
  // the most programs a call uses, not the call's own count: calls of different sizes use
  // different counts, and a word must have one sender over all calls, or a sender already in
  // the next call could set (and release) a word that a receiver still waits on in this one.
  int64_t* flags = nullptr;
  int64_t calls = 0;
  int programs = 1;  // per destination rank
  CompileOptions options;
  detail::RunStreams streams;
  /// Runs `body` with the stream its launches go on (null on the host target).
  template <class F>
  void call(const runtime::Stream* stream, F&& body) {
    if (!detail::on_gpu(target)) return body(nullptr);
    const runtime::Stream& on = streams.enter(stream, "collectives (all_gather, reduce_scatter, all_reduce)");
    body(&on);
    streams.leave(on, stream);
  }
  std::optional<Kernel> kernels[2][2];  // [bf16][reduce], compiled at their first use
  const Kernel& kernel(bool is_bf16, bool reduce) {
    std::optional<Kernel>& k = kernels[is_bf16][reduce];
    const ir::DType d = is_bf16 ? ir::DType::bf16 : ir::DType::f32;
    // Pushing and summing by separate programs measured faster for f32 sums on 2 ranks (0.98 of
    // NCCL's all-reduce at 512 MiB, against 0.88), slower for bf16 sums and for copies
    // (bench/RESULTS.md); other rank counts are not measured yet. $TILEDIST_SPLIT (0 or 1) sets
    // it for sums, to measure.
    const std::string env = std::getenv("TILEDIST_SPLIT") ? std::getenv("TILEDIST_SPLIT") : "";
    if (!env.empty() && env != "0" && env != "1")
      throw Error(str_cat("tiledist: collectives: $TILEDIST_SPLIT = '", env, "' (0 or 1)"));
    const int split = reduce && (env.empty() ? !is_bf16 && ranks == 2 : env == "1");
    if (!k) k = compile(reduce ? reduce_scatter_kernel(d) : all_gather_kernel(d), {{"SPLIT", split}}, target, options);
    return *k;
  }
  ~State() {  // (here, not in ~Collectives: copies share the state; it goes once, with the last)
    streams.finish();
    if (flags) detail::symm_release(target, flags);
    if (staging) detail::symm_release(target, staging);
  }
};

Collectives::Collectives(const Target& target, size_t capacity_bytes) : s_(std::make_shared<State>()) {
  State& s = *s_;
  s.target = target;
  const bool gpu = detail::on_gpu(target);
  s.ranks = detail::world_ranks(target);
  s.row_bytes = std::max<size_t>(capacity_bytes / 2 / s.ranks / 16 * 16, 16);
  s.staging = static_cast<char*>(detail::symm_zeroed(target, 2 * s.ranks * s.row_bytes));
  s.programs = gpu ? std::max(1, cuda::device().sms / s.ranks) : 2;
  s.flags = static_cast<int64_t*>(detail::symm_zeroed(target, 2 * size_t(s.ranks) * s.programs * 8));  // + pushed[][]
  barrier_all();  // no rank signals before every rank has zeroed its flags
  s.options = CompileOptions::from_env();
  if (gpu) s.options.num_warps = 16;  // more bytes in flight per program
  s.kernel(false, false);
  s.kernel(false, true);
}

Collectives::~Collectives() = default;

int Collectives::ranks() const { return s_->ranks; }

template <class T>
void Collectives::run(bool reduce, const T* in, T* out, size_t count, size_t in_stride, size_t out_stride,
                      const runtime::Stream* stream, bool in_place) {
  State& s = *s_;
  const Kernel& k = s.kernel(std::is_same_v<T, bf16>, reduce);
  const size_t capacity = s.row_bytes / sizeof(T);  // elements per row
  for (size_t done = 0; done < count; done += capacity) {
    const size_t piece = std::min(capacity, count - done);
    T* half = reinterpret_cast<T*>(s.staging + (++s.calls % 2) * s.ranks * s.row_bytes);
    // Programs per destination: about 16 KiB each, up to the device's share.
    int programs = static_cast<int>(std::clamp<size_t>((piece * sizeof(T) + 16383) / 16384, 1, size_t(s.programs)));
    auto ints = [](size_t v) { return static_cast<int64_t>(v); };
    detail::launch(k, stream, {programs, s.ranks}, in + done, half, s.flags, out + done, ints(piece), ints(in_stride),
                   ints(out_stride), s.calls, s.programs, int(in_place));
  }
}

template <class T>
void Collectives::all_reduce_of(const T* in, T* out, size_t count, AllReduce algorithm, bool in_place,
                                const runtime::Stream* stream) {
  const State& s = *s_;
  if (algorithm == AllReduce::automatic)
    algorithm = s.ranks > 2 && count * sizeof(T) >= kTwoShotBytes ? AllReduce::two_shot : AllReduce::one_shot;
  // Two shots: each rank sums one part (16-byte aligned) and gathers the others' sums; the
  // elements past ranks whole parts, fewer than 16 bytes' worth per rank, go in one shot.
  constexpr size_t align = 16 / sizeof(T);
  const size_t part = count / s.ranks / align * align;
  if (algorithm == AllReduce::one_shot || s.ranks == 1 || part == 0)
    return run(true, in, out, count, 0, 0, stream, in_place);
  // (In place, the reduce-scatter writes our part over our input's and the all-gather reads
  // it there: both in place as NCCL's are, safe without a guard.)
  T* mine = out + detail::world_rank(s.target) * part;
  run(true, in, mine, part, part, 0, stream);
  run(false, static_cast<const T*>(mine), out, part, 0, part, stream);
  const size_t body = part * s.ranks;
  if (body < count) run(true, in + body, out + body, count - body, 0, 0, stream, in_place);
}

/// Whether [in, in + in_count) and [out, out + out_count) overlap: false where they are apart,
/// true where they overlap in the op's in-place form (`in_place_form`: all_reduce in == out,
/// reduce_scatter out == in + rank * count, all_gather in == out + rank * count); any other
/// overlap throws. Of the in-place forms only the one-shot all-reduce needs its input guarded:
/// the others read and write each element of this rank's own row in the same thread.
static bool overlapping(const char* op, const void* in, size_t in_bytes, const void* out, size_t out_bytes,
                        bool in_place_form) {
  const char *i = static_cast<const char*>(in), *o = static_cast<const char*>(out);
  if (i + in_bytes <= o || o + out_bytes <= i) return false;
  if (in_place_form) return true;
  throw Error(str_cat(
      "tiledist: ", op, ": the input and output overlap; they must be apart, or in place as NCCL's are ",
      "(all_reduce: in == out; reduce_scatter: out == in + rank * count; all_gather: in == out + rank * count)"));
}

template <class T>
void Collectives::all_gather_of(const T* in, T* out, size_t count, const runtime::Stream* stream) {
  const size_t own = size_t(detail::world_rank(s_->target)) * count;
  overlapping("all_gather", in, count * sizeof(T), out, count * s_->ranks * sizeof(T), in == out + own);
  s_->call(stream, [&](const runtime::Stream* on) { run(false, in, out, count, 0, count, on); });
}
template <class T>
void Collectives::reduce_scatter_of(const T* in, T* out, size_t count, const runtime::Stream* stream) {
  const size_t own = size_t(detail::world_rank(s_->target)) * count;
  overlapping("reduce_scatter", in, count * s_->ranks * sizeof(T), out, count * sizeof(T), out == in + own);
  s_->call(stream, [&](const runtime::Stream* on) { run(true, in, out, count, count, 0, on); });
}
template <class T>
void Collectives::all_reduce_checked(const T* in, T* out, size_t count, AllReduce algorithm,
                                     const runtime::Stream* stream) {
  const bool in_place = overlapping("all_reduce", in, count * sizeof(T), out, count * sizeof(T), in == out);
  s_->call(stream, [&](const runtime::Stream* on) { all_reduce_of(in, out, count, algorithm, in_place, on); });
}

void Collectives::all_gather(const float* in, float* out, size_t count, const runtime::Stream* stream) {
  all_gather_of(in, out, count, stream);
}
void Collectives::reduce_scatter(const float* in, float* out, size_t count, const runtime::Stream* stream) {
  reduce_scatter_of(in, out, count, stream);
}
void Collectives::all_reduce(const float* in, float* out, size_t count, AllReduce algorithm,
                             const runtime::Stream* stream) {
  all_reduce_checked(in, out, count, algorithm, stream);
}
void Collectives::all_gather(const bf16* in, bf16* out, size_t count, const runtime::Stream* stream) {
  all_gather_of(in, out, count, stream);
}
void Collectives::reduce_scatter(const bf16* in, bf16* out, size_t count, const runtime::Stream* stream) {
  reduce_scatter_of(in, out, count, stream);
}
void Collectives::all_reduce(const bf16* in, bf16* out, size_t count, AllReduce algorithm,
                             const runtime::Stream* stream) {
  all_reduce_checked(in, out, count, algorithm, stream);
}

}  // namespace tiledist::kernels
