// TMA tensor maps: what the code generator asks for and the runtime builds at launch.
//
// A pipelined wgmma loop whose operand loads read a 2-D tile of a row-major tensor through a
// kernel parameter (`base + row * stride + col`, masked by `row < rows` and `col < cols`) copies
// its tiles with cp.async.bulk.tensor. The copy reads a CUtensorMap, which only the host can
// encode (cuTensorMapEncodeTiled): the kernel takes one as a trailing 128-byte parameter per
// recipe, and the launch encodes it from the arguments it was given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/types.h"

namespace tiledist::runtime {

struct TmaRecipe {
  /// A size: the value of runtime parameter `param` (an integer), or `value` where param < 0.
  struct Dim {
    int param = -1;
    int64_t value = 0;
    bool operator==(const Dim&) const = default;
  };
  int pointer = -1;  // the runtime parameter holding the tensor's base address
  ir::DType dtype = ir::DType::bf16;
  Dim cols, rows, stride;  // elements per row (the contiguous dimension), rows, elements between rows
  int64_t box_cols = 0, box_rows = 0;  // one copy: 128 bytes of a row (box_cols elements) x box_rows rows

  bool operator==(const TmaRecipe&) const = default;
  /// One line, as the disk cache stores it: "pointer dtype cols rows stride box_cols box_rows",
  /// each size "pN" (parameter N) or a number.
  std::string str() const;
  static std::optional<TmaRecipe> parse(const std::string& s);
};

/// Recipes joined with ';' (the cache's `tma` field), and back; nullopt where any is malformed.
std::string tma_recipes_str(const std::vector<TmaRecipe>& recipes);
std::optional<std::vector<TmaRecipe>> parse_tma_recipes(const std::string& s);

}  // namespace tiledist::runtime
