// Pieces of the GEMM kernels (gemm, ag_gemm): the grouped tile order and one output tile.
#pragma once

#include <cstdlib>
#include <string>

#include "tiledist.h"

namespace tiledist::kernels::detail {

/// Whether the kernel library may warp specialize ($TILEDIST_WS=0 turns it off for it too).
inline bool library_warp_specialize() {
  const char* ws = std::getenv("TILEDIST_WS");
  return !(ws && std::string(ws) == "0");
}

/// Tile number `pid`'s (pid_m, pid_n) over a (num_m, num_n) grid of tiles, in groups of
/// GROUP_M rows of tiles taken column by column, so that the programs running at once share
/// operand tiles in L2.
inline std::pair<tl::Tensor, tl::Tensor> grouped_tile(const tl::Tensor& pid, const tl::Tensor& num_m,
                                                      const tl::Tensor& num_n, int group_m_tiles) {
  auto in_group = num_n * group_m_tiles;
  auto first_m = pid / in_group * group_m_tiles;
  // (at least 1: the maximum says so to the compiler, whose TMA copies need tile coordinates
  // it can prove non-negative)
  auto group_m = tl::maximum(tl::minimum(num_m - first_m, group_m_tiles), 1);
  return {first_m + pid % in_group % group_m, pid % in_group / group_m};
}
/// The same, the tile numbered by the program's place in the 2-D grid.
inline std::pair<tl::Tensor, tl::Tensor> grouped_tile(int group_m_tiles) {
  auto num_m = tl::num_programs(0);
  return grouped_tile(tl::program_id(1) * num_m + tl::program_id(0), num_m, tl::num_programs(1), group_m_tiles);
}

/// Rows and columns of BM x BN tiles over M x N (counts the compiler knows are not negative).
inline std::pair<tl::Tensor, tl::Tensor> tile_counts(tl::Int M, tl::Int N, int BM, int BN) {
  return {(tl::maximum(M, 0) + (BM - 1)) / BM, (tl::maximum(N, 0) + (BN - 1)) / BN};
}
/// A persistent kernel's tile loop: program p takes tiles p, p + programs, ... of the grouped
/// order, `body(pid_m, pid_n)` for each.
template <class F>
void for_each_tile(const tl::Tensor& num_m, const tl::Tensor& num_n, int group_m_tiles, F body) {
  tl::for_range(tl::program_id(0), num_m * num_n, tl::num_programs(0), [&](const tl::Tensor& tile) {
    auto [pid_m, pid_n] = grouped_tile(tile, num_m, num_n, group_m_tiles);
    body(pid_m, pid_n);
  });
}

/// The f32 accumulator of output tile (pid_m, pid_n) over columns [k_begin, k_end) of A (rows of
/// B): A[rows of the tile, k_begin:k_end] @ B[k_begin:k_end, its columns]. k_begin must be a
/// multiple of BK the compiler can prove non-negative (for TMA's coordinates), k_end <= K.
/// `transposed`: the same tile's accumulator transposed, [BN, BM] = B[k_begin:k_end, its
/// columns]^T @ A[its rows, k_begin:k_end]^T, each operand loaded as it lies and transposed for
/// the dot: a tensor core then takes BN rows by BM columns (where N is short and M long, a
/// BM = 256 wide instruction covers N in 128-row tiles with none of them empty).
template <class T>
tl::Tensor gemm_acc(tl::Ptr<T> a, tl::Ptr<T> b, tl::Int M, tl::Int N, tl::Int K, const tl::Tensor& pid_m,
                    const tl::Tensor& pid_n, int BM, int BN, int BK, const tl::Operand& k_begin,
                    const tl::Operand& k_end, bool transposed = false) {
  using tl::Tensor;
  auto row = tl::expand_dims(pid_m * BM + tl::arange(0, BM), 1);  // [BM, 1]
  auto col = tl::expand_dims(pid_n * BN + tl::arange(0, BN), 0);  // [1, BN]
  auto rk = tl::arange(0, BK);
  auto zeros = transposed ? tl::zeros({BN, BM}, tl::float32) : tl::zeros({BM, BN}, tl::float32);
  Tensor out;
  tl::profile(  // (the profiler's region: dsl/profile.h; nothing where it is off)
      "mainloop",
      [&] {
        out = tl::for_range(k_begin, k_end, BK, zeros, [&](Tensor k, Tensor acc) {
          auto ka = tl::expand_dims(k + rk, 0);  // [1, BK]
          auto kb = tl::expand_dims(k + rk, 1);  // [BK, 1]
          auto at = tl::load(a + row * K + ka, (row < M) & (ka < K), 0.0f);
          auto bt = tl::load(b + kb * N + col, (kb < K) & (col < N), 0.0f);
          return transposed ? tl::dot(tl::trans(bt), tl::trans(at), acc) : tl::dot(at, bt, acc);
        });
      },
      {pid_m, pid_n});
  return out;
}
/// C's tile (pid_m, pid_n): its elements' pointers and mask, [BM, BN]; `transposed`, [BN, BM]
/// (for gemm_acc's transposed accumulator: element (j, i) is C[pid_m * BM + i, pid_n * BN + j]).
inline std::pair<tl::Tensor, tl::Tensor> c_tile(tl::Ptr<float> c, tl::Int M, tl::Int N, const tl::Tensor& pid_m,
                                                const tl::Tensor& pid_n, int BM, int BN, bool transposed = false) {
  auto row = tl::expand_dims(pid_m * BM + tl::arange(0, BM), transposed ? 0 : 1);  // [BM, 1], or [1, BM]
  auto col = tl::expand_dims(pid_n * BN + tl::arange(0, BN), transposed ? 1 : 0);  // [1, BN], or [BN, 1]
  return {c + row * N + col, (row < M) & (col < N)};
}
/// The same over all of K: A[rows of the tile, :] @ B[:, its columns].
template <class T>
tl::Tensor gemm_acc(tl::Ptr<T> a, tl::Ptr<T> b, tl::Int M, tl::Int N, tl::Int K, const tl::Tensor& pid_m,
                    const tl::Tensor& pid_n, int BM, int BN, int BK) {
  return gemm_acc(a, b, M, N, K, pid_m, pid_n, BM, BN, BK, 0, K);
}

/// C[tile] = A[rows of the tile, :] @ B[:, columns of the tile], f32 accumulation, masked edges;
/// computed transposed (gemm_acc's) where `transposed`.
template <class T>
void gemm_tile(tl::Ptr<T> a, tl::Ptr<T> b, tl::Ptr<float> c, tl::Int M, tl::Int N, tl::Int K, const tl::Tensor& pid_m,
               const tl::Tensor& pid_n, int BM, int BN, int BK, bool transposed = false) {
  auto acc = gemm_acc(a, b, M, N, K, pid_m, pid_n, BM, BN, BK, 0, K, transposed);
  auto [ptrs, mask] = c_tile(c, M, N, pid_m, pid_n, BM, BN, transposed);
  tl::profile("epilogue", [&] { tl::store(ptrs, acc, mask); }, {pid_m, pid_n});
}

}  // namespace tiledist::kernels::detail
