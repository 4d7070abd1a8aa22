#include "runtime/tma.h"

#include <sstream>

#include "ir/support.h"

namespace tiledist::runtime {

namespace {
std::string dim_str(const TmaRecipe::Dim& d) { return d.param >= 0 ? str_cat("p", d.param) : str_cat(d.value); }

std::optional<TmaRecipe::Dim> parse_dim(const std::string& s) {
  if (s.empty()) return std::nullopt;
  TmaRecipe::Dim d;
  const bool param = s[0] == 'p';
  char* end = nullptr;
  long long v = std::strtoll(s.c_str() + (param ? 1 : 0), &end, 10);
  if (*end || end == s.c_str() + (param ? 1 : 0) || v < 0) return std::nullopt;
  if (param) d.param = static_cast<int>(v);
  else d.value = v;
  return d;
}
}  // namespace

std::string TmaRecipe::str() const {
  return str_cat(pointer, " ", ir::dtype_name(dtype), " ", dim_str(cols), " ", dim_str(rows), " ", dim_str(stride), " ", box_cols,
                 " ", box_rows);
}

std::optional<TmaRecipe> TmaRecipe::parse(const std::string& s) {
  std::istringstream in(s);
  std::string pointer, dtype, cols, rows, stride;
  TmaRecipe r;
  if (!(in >> pointer >> dtype >> cols >> rows >> stride >> r.box_cols >> r.box_rows)) return std::nullopt;
  std::string rest;
  if (in >> rest) return std::nullopt;
  auto p = parse_dim(pointer);
  auto d = ir::parse_dtype(dtype);
  auto c = parse_dim(cols), n = parse_dim(rows), st = parse_dim(stride);
  if (!p || p->param >= 0 || !d || !c || !n || !st) return std::nullopt;
  if (r.box_cols < 1 || r.box_cols > 256 || r.box_rows < 1 || r.box_rows > 256) return std::nullopt;
  r.pointer = static_cast<int>(p->value);
  r.dtype = *d;
  r.cols = *c, r.rows = *n, r.stride = *st;
  return r;
}

std::string tma_recipes_str(const std::vector<TmaRecipe>& recipes) {
  std::string s;
  for (const TmaRecipe& r : recipes) s += (s.empty() ? "" : ";") + r.str();
  return s;
}

std::optional<std::vector<TmaRecipe>> parse_tma_recipes(const std::string& s) {
  std::vector<TmaRecipe> out;
  if (!s.empty() && s.back() == ';') return std::nullopt;  // (an empty recipe)
  size_t at = 0;
  while (at < s.size()) {
    size_t end = s.find(';', at);
    if (end == std::string::npos) end = s.size();
    auto r = TmaRecipe::parse(s.substr(at, end - at));
    if (!r) return std::nullopt;
    out.push_back(*r);
    at = end + 1;
  }
  return out;
}

}  // namespace tiledist::runtime
