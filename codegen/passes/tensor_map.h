// Whether a load of a 2-D tile reads a box of a tensor that a TMA tensor map can describe
// (sm_90a's bulk tensor copies), and if so the map's recipe and the box's coordinates: what the
// pipelining pass needs to copy the tile by TMA instead of by cp.async.
#pragma once

#include <optional>
#include <vector>

#include "codegen/axis_info.h"
#include "ir/ir.h"
#include "support/tma.h"

namespace tiledist::codegen {

struct TensorMapView {
  /// A product of scalar integers (values of the kernel) and `scale`.
  struct Term {
    std::vector<ir::Value*> factors;
    int64_t scale = 1;
  };
  /// A coordinate: the sum of `terms` and `offset`.
  struct Coord {
    std::vector<Term> terms;
    int64_t offset = 0;
  };
  runtime::TmaRecipe recipe;  // box: 128 bytes of the tile's row by its rows, 1 along the others
  std::vector<Coord> coords;  // the tile's first element, one per dimension of the recipe
  int64_t copies = 1;         // boxes per tile: the tile's row in 128-byte column blocks
  /// The tokens of the consume_tokens the base pointer passes through (a wait's, for data that
  /// another rank wrote): the copies must follow those waits, as the load did.
  std::vector<ir::Value*> tokens;
};

/// The view of `load` (a [R, C] tile, C contiguous) as a box of a tensor, where its address is
///   splat(p + s1 + s2 + ...) + row * stride + col
/// with p a pointer parameter (16-byte aligned), each s a product of scalar integers, row and
/// col tile indices (`expand_dims(x + arange(o, o + n), axis)`, x and o not negative), and
/// stride a product of integer parameters and constants (a multiple of 16 bytes); and its mask
/// (if any) bounds row or col by such a product (`row < M`), its other value (if any) zero.
/// Dimension 0 is col, 1 row; a scalar offset joins an axis the mask does not bound (col's, or
/// row's where the offset is a multiple of the stride), or else makes a dimension of its own
/// (an expert's weights at `w + expert * K * N`: coordinate `expert`, stride `K * N`). An axis
/// the mask does not bound is unbounded (runtime::TmaRecipe::kUnbounded), as the load is.
/// Rows of 128 bytes or more (a multiple of 128), at most 256 rows, 1- and 2-byte elements. The
/// pointer may pass through hints and consume_tokens (their tokens are the view's).
/// Sizes are taken as products that do not wrap, as the kernel's own address arithmetic is.
std::optional<TensorMapView> tensor_map_view(const ir::Function& f, const ir::Op& load, AxisAnalysis& axis);

}  // namespace tiledist::codegen
