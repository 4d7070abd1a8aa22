// Types of the tile IR: scalars, pointers and block tensors of either.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tiledist::ir {

struct Layout;
using LayoutRef = std::shared_ptr<const Layout>;

/// Element types. The order is the table of `dtype_name`.
enum class DType : uint8_t { i1, i8, i16, i32, i64, f16, bf16, f32, f64, f8e4m3, f8e5m2 };
inline constexpr int kNumDTypes = 11;

const char* dtype_name(DType t);
std::optional<DType> parse_dtype(const std::string& s);
bool is_int(DType t);
bool is_float(DType t);
/// Bits of one element in memory (i1 is stored as a byte).
int dtype_bits(DType t);
int dtype_bytes(DType t);

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
  static Type tensor(DType t, std::vector<int64_t> shape) { return Type{t, false, AddrSpace::global, std::move(shape), nullptr}; }

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
