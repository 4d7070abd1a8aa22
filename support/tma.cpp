#include "support/tma.h"

#include <sstream>

#include "support/support.h"

namespace tiledist::runtime {

namespace {
std::string dim_str(const TmaRecipe::Dim& d) {
  std::string s;
  for (int p : d.params) s += str_cat(s.empty() ? "" : "*", "p", p);
  if (d.value != 1 || d.params.empty()) s += str_cat(s.empty() ? "" : "*", d.value);
  return s;
}

template <class T, class F>
std::string list_str(const std::vector<T>& xs, F one) {
  std::string s;
  for (const T& x : xs) s += (s.empty() ? "" : ",") + one(x);
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  for (;;) {
    size_t end = s.find(sep, at);
    out.push_back(s.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) return out;
    at = end + 1;
  }
}

std::optional<int64_t> parse_count(const std::string& s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  for (char c : s)
    if (c < '0' || c > '9') return std::nullopt;
  return std::stoll(s);
}

std::optional<TmaRecipe::Dim> parse_dim(const std::string& s) {
  TmaRecipe::Dim d;
  bool number = false;
  for (const std::string& f : split(s, '*')) {
    auto v = parse_count(f.size() > 1 && f[0] == 'p' ? f.substr(1) : f);
    if (!v) return std::nullopt;
    if (f[0] == 'p') {
      if (number) return std::nullopt;  // (parameters first, as str() writes them)
      d.params.push_back(static_cast<int>(*v));
    } else {
      if (number) return std::nullopt;
      d.value = *v, number = true;
    }
  }
  return d;
}
}  // namespace

std::string TmaRecipe::str() const {
  return str_cat(pointer, " ", ir::dtype_name(dtype), " ", list_str(dims, dim_str), " ", list_str(strides, dim_str),
                 " ", list_str(box, [](int64_t b) { return str_cat(b); }));
}

std::optional<TmaRecipe> TmaRecipe::parse(const std::string& s) {
  std::istringstream in(s);
  std::string pointer, dtype, dims, strides, box, rest;
  if (!(in >> pointer >> dtype >> dims >> strides >> box) || (in >> rest)) return std::nullopt;
  TmaRecipe r;
  auto p = parse_count(pointer);
  auto d = ir::parse_dtype(dtype);
  if (!p || !d) return std::nullopt;
  r.pointer = static_cast<int>(*p), r.dtype = *d;
  for (const std::string& x : split(dims, ',')) {
    auto v = parse_dim(x);
    if (!v) return std::nullopt;
    r.dims.push_back(*v);
  }
  for (const std::string& x : split(strides, ',')) {
    auto v = parse_dim(x);
    if (!v) return std::nullopt;
    r.strides.push_back(*v);
  }
  for (const std::string& x : split(box, ',')) {
    auto v = parse_count(x);
    if (!v || *v < 1 || *v > 256) return std::nullopt;
    r.box.push_back(*v);
  }
  if (r.dims.size() < 2 || r.dims.size() > 5 || r.strides.size() + 1 != r.dims.size() || r.box.size() != r.dims.size())
    return std::nullopt;
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
