#include "ir/types.h"

#include "ir/layout.h"
#include "support/support.h"

namespace tiledist::ir {

const char* addrspace_name(AddrSpace s) {
  switch (s) {
    case AddrSpace::global:
      return "global";
    case AddrSpace::shared:
      return "shared";
    case AddrSpace::symmetric:
      return "symmetric";
  }
  return "?";
}

int64_t Type::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string Type::str() const {
  std::string elem = is_ptr ? str_cat("ptr<", dtype_name(dtype),
                                      space == AddrSpace::global ? "" : str_cat(", ", addrspace_name(space)), ">")
                            : std::string(dtype_name(dtype));
  if (!is_tensor()) return elem;
  std::string s = is_memdesc() ? "memdesc<" : "tensor<";
  for (int64_t d : shape) s += std::to_string(d) + "x";
  return s + elem + (layout ? ", " + layout->str() : "") + ">";
}

bool Type::operator==(const Type& o) const {
  return dtype == o.dtype && is_ptr == o.is_ptr && space == o.space && shape == o.shape &&
         same_layout(layout, o.layout);
}

}  // namespace tiledist::ir
