// TMA tensor maps: what the code generator asks for and the runtime builds at launch.
//
// A pipelined loop whose operand loads read a box of a tensor through a kernel parameter (a
// base pointer, a contiguous dimension and up to four others, each of an extent the launch's
// arguments give, or unbounded where the load does not mask it) copies its tiles with
// cp.async.bulk.tensor. The copy reads a CUtensorMap, which only the host can encode
// (cuTensorMapEncodeTiled): the kernel takes one as a trailing 128-byte parameter per recipe,
// and the launch encodes it from the arguments it was given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "support/dtype.h"

namespace tiledist::runtime {

struct TmaRecipe {
  /// A size: the product of runtime parameters `params` (integers) and `value`.
  struct Dim {
    std::vector<int> params;
    int64_t value = 1;
    static Dim param(int p) { return Dim{{p}, 1}; }
    static Dim of(int64_t v) { return Dim{{}, v}; }
    bool operator==(const Dim&) const = default;
  };
  /// The extent of a dimension the load does not mask: every coordinate a copy names (a
  /// signed 32-bit number) is inside it; the kernel's addresses are its own business. (Not
  /// 2^32, which cuTensorMapEncodeTiled accepts: on the GPU, maps with it stopped at an
  /// illegal instruction where the same kernels' exact 2-D maps ran; bench/RESULTS.md,
  /// 2026-11-25.)
  static constexpr int64_t kUnbounded = (int64_t(1) << 31) - 1;

  int pointer = -1;  // the runtime parameter holding the tensor's base address
  ir::DType dtype = ir::DType::bf16;
  std::vector<Dim> dims;     // extents, the contiguous dimension first (2 to 5 of them)
  std::vector<Dim> strides;  // elements between consecutive indices of dims[1], dims[2], ...
  std::vector<int64_t> box;  // one copy's box, in elements, the contiguous dimension first

  bool operator==(const TmaRecipe&) const = default;
  /// One line, as the disk cache and the IR store it: "pointer dtype dims strides box", each
  /// list joined by ',' and each size a product ('*') of parameters "pN" and a number, e.g.
  /// "1 bf16 p7,2147483647,p5 p7,p5*p7 64,128,1".
  std::string str() const;
  static std::optional<TmaRecipe> parse(const std::string& s);
};

/// Recipes joined with ';' (the cache's `tma` field), and back; nullopt where any is malformed.
std::string tma_recipes_str(const std::vector<TmaRecipe>& recipes);
std::optional<std::vector<TmaRecipe>> parse_tma_recipes(const std::string& s);

}  // namespace tiledist::runtime
