// Types of the tile IR: scalars, pointers and block tensors of either.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/dtype.h"

namespace tiledist::ir {

struct Layout;
using LayoutRef = std::shared_ptr<const Layout>;

enum class AddrSpace : uint8_t { global, shared, symmetric };
const char* addrspace_name(AddrSpace s);

/// A scalar, a pointer, or a block tensor (static shape) of scalars or pointers.
/// Pointers carry their pointee dtype in `dtype` and set `is_ptr`. On GPU targets, once the
/// layout passes have run, a tensor carries its layout (ir/layout.h); before them, and on the
/// CPU backend, it has none.
struct Type {
  DType dtype = DType::i32;
  bool is_ptr = false;
  AddrSpace space = AddrSpace::global;
  std::vector<int64_t> shape;  // empty: not a tensor
  LayoutRef layout;            // null: none assigned

  static Type scalar(DType t) { return Type{t, false, AddrSpace::global, {}, nullptr}; }
  static Type ptr(DType pointee, AddrSpace s = AddrSpace::global) { return Type{pointee, true, s, {}, nullptr}; }
  static Type tensor(DType t, std::vector<int64_t> shape) {
    return Type{t, false, AddrSpace::global, std::move(shape), nullptr};
  }

  /// A buffer of shared memory (GPU IR, after the pipelining pass): `memdesc<3x64x32xbf16,
  /// #shared<...>>`, its leading dimensions indexing tiles whose last two the layout places.
  /// Read and written only by the ops made for it (local_alloc, async_copy, local_load).
  static Type memdesc(DType t, std::vector<int64_t> shape, LayoutRef l) {
    return Type{t, false, AddrSpace::shared, std::move(shape), std::move(l)};
  }

  bool is_tensor() const { return !shape.empty(); }
  bool is_memdesc() const { return !is_ptr && space == AddrSpace::shared && !shape.empty(); }
  int64_t numel() const;
  /// The element type: the same type without shape.
  Type element() const { return Type{dtype, is_ptr, space, {}, nullptr}; }
  Type with_shape(std::vector<int64_t> s) const { return Type{dtype, is_ptr, space, std::move(s), nullptr}; }
  /// The same shape and layout (an elementwise op's result: a cast, a comparison).
  Type with_dtype(DType t) const { return Type{t, false, AddrSpace::global, shape, layout}; }
  Type with_layout(LayoutRef l) const { return Type{dtype, is_ptr, space, shape, std::move(l)}; }
  /// The same type without its layout.
  Type unlaid() const { return Type{dtype, is_ptr, space, shape, nullptr}; }
  bool is_int() const { return !is_ptr && ir::is_int(dtype); }
  bool is_float() const { return !is_ptr && ir::is_float(dtype); }
  bool is_bool() const { return !is_ptr && dtype == DType::i1; }

  std::string str() const;
  /// Equal types have equal layouts (compared by value), or none.
  bool operator==(const Type& o) const;
};

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace tiledist::ir
