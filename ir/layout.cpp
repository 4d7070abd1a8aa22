// Layouts: their makers, their text, and their linear maps (layout.h says what each one is).
// The fragment tables of the matrix instructions live here and only here: mma.sync's m16n8
// accumulator and its A/B operands (PTX ISA, "Matrix Fragments for mma.m16n8k16/k32"), wgmma's
// (four warps' 16-row slices of the same), and MFMA's (AMD CDNA ISA, the 32x32 and 16x16 tiles).
#include "ir/layout.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <stdexcept>

#include "ir/types.h"
#include "support/support.h"

namespace tiledist::ir {

namespace {

[[noreturn]] void bad(const std::string& msg) { throw std::invalid_argument(msg); }

bool pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }
int log2_of(int64_t v) {
  int b = 0;
  while ((int64_t{1} << b) < v) ++b;
  return b;
}
int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

void check_pow2s(const std::vector<int64_t>& v, const char* what) {
  for (int64_t x : v)
    if (!pow2(x)) bad(str_cat(what, " ", shape_str(v), ": each must be a power of two"));
}
void check_order(const std::vector<int64_t>& order, size_t rank) {
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    if (sorted.size() != rank || sorted[i] != static_cast<int64_t>(i))
      bad(str_cat("order ", shape_str(order), " is not a permutation of the ", rank, " dimensions"));
}

}  // namespace

const char* mma_kind_name(MmaKind k) {
  switch (k) {
    case MmaKind::mma_sync:
      return "mma_sync";
    case MmaKind::wgmma:
      return "wgmma";
    case MmaKind::mfma:
      return "mfma";
  }
  return "?";
}

const char* convert_cost_name(ConvertCost c) {
  switch (c) {
    case ConvertCost::none:
      return "none";
    case ConvertCost::registers:
      return "registers";
    case ConvertCost::warp_shuffle:
      return "warp_shuffle";
    case ConvertCost::shared_memory:
      return "shared_memory";
  }
  return "?";
}

// ---- makers

LayoutRef Layout::blocked(std::vector<int64_t> spt, std::vector<int64_t> tpw, std::vector<int64_t> wpc,
                          std::vector<int64_t> order) {
  if (spt.empty() || spt.size() != tpw.size() || spt.size() != wpc.size())
    bad(str_cat("blocked: size_per_thread ", shape_str(spt), ", threads_per_warp ", shape_str(tpw),
                " and warps_per_cta ", shape_str(wpc), " need one entry per dimension"));
  check_pow2s(spt, "size_per_thread");
  check_pow2s(tpw, "threads_per_warp");
  check_pow2s(wpc, "warps_per_cta");
  check_order(order, spt.size());
  int64_t lanes = product(tpw);
  if (lanes != 32 && lanes != 64)
    bad(str_cat("blocked: threads_per_warp ", shape_str(tpw), " makes ", lanes, " lanes, not 32 or 64"));
  auto l = std::make_shared<Layout>();
  l->kind = Kind::blocked;
  l->size_per_thread = std::move(spt), l->threads_per_warp = std::move(tpw), l->warps_per_cta = std::move(wpc);
  l->order = std::move(order);
  return l;
}

LayoutRef Layout::mma_acc(MmaKind kind, std::vector<int64_t> wpc, std::vector<int64_t> instr) {
  if (wpc.size() != 2 || instr.size() != 2) bad("mma: warps_per_cta and instr_shape take two dimensions");
  check_pow2s(wpc, "warps_per_cta");
  switch (kind) {
    case MmaKind::mma_sync:
      if (instr != std::vector<int64_t>{16, 8}) bad(str_cat("mma: mma_sync's tile is [16, 8], not ", shape_str(instr)));
      break;
    case MmaKind::wgmma:
      if (instr[0] != 64 || instr[1] < 8 || instr[1] > 256 || instr[1] % 8)
        bad(str_cat("mma: wgmma's tile is [64, N], N a multiple of 8 up to 256, not ", shape_str(instr)));
      if (wpc[0] % 4)
        bad(str_cat("mma: wgmma spreads over whole warpgroups (warps_per_cta[0] a multiple of 4), not ",
                    shape_str(wpc)));
      break;
    case MmaKind::mfma:
      if (instr != std::vector<int64_t>{32, 32} && instr != std::vector<int64_t>{16, 16})
        bad(str_cat("mma: mfma's tile is [32, 32] or [16, 16], not ", shape_str(instr)));
      break;
  }
  auto l = std::make_shared<Layout>();
  l->kind = Kind::mma, l->mma = kind, l->warps_per_cta = std::move(wpc), l->instr_shape = std::move(instr);
  return l;
}

LayoutRef Layout::dot_operand(int op_index, LayoutRef parent, int k_width) {
  if (op_index != 0 && op_index != 1) bad(str_cat("dot_op: operand ", op_index, " is neither A (0) nor B (1)"));
  if (!parent || parent->kind != Kind::mma) bad("dot_op: the parent must be an mma layout");
  if (!pow2(k_width) || k_width > 16) bad(str_cat("dot_op: k_width ", k_width, " must be a power of two up to 16"));
  if (parent->mma == MmaKind::mfma) {
    if (k_width < 2) bad("dot_op: an MFMA operand holds at least 2 elements along K");
  } else if (k_width < 2 || k_width > 4) {
    bad(str_cat("dot_op: an mma.sync/wgmma operand holds 2 (16-bit) or 4 (8-bit) elements along K, not ", k_width));
  }
  auto l = std::make_shared<Layout>();
  l->kind = Kind::dot_operand, l->op_index = op_index, l->parent = std::move(parent), l->k_width = k_width;
  return l;
}

LayoutRef Layout::slice(int dim, LayoutRef parent) {
  if (!parent || !parent->is_distributed()) bad("slice: the parent must be a distributed layout");
  if (dim < 0 || dim >= parent->rank())
    bad(str_cat("slice: dimension ", dim, " of a rank-", parent->rank(), " parent"));
  if (parent->rank() < 2) bad("slice: the parent must have two dimensions or more");
  auto l = std::make_shared<Layout>();
  l->kind = Kind::slice, l->dim = dim, l->parent = std::move(parent);
  return l;
}

LayoutRef Layout::shared(int vec, int per_phase, int max_phase, std::vector<int64_t> order, int64_t block) {
  if (!pow2(vec) || !pow2(per_phase) || !pow2(max_phase))
    bad(str_cat("shared: vec ", vec, ", per_phase ", per_phase, ", max_phase ", max_phase, " must be powers of two"));
  if (block && (!pow2(block) || block < int64_t{vec} * max_phase))
    bad(str_cat("shared: block ", block, " must be a power of two of at least vec x max_phase (", vec * max_phase,
                ")"));
  check_order(order, 2);
  auto l = std::make_shared<Layout>();
  l->kind = Kind::shared, l->vec = vec, l->per_phase = per_phase, l->max_phase = max_phase, l->order = std::move(order);
  l->block = block;
  return l;
}

LayoutRef Layout::transposed() const {
  TD_ASSERT(kind == Kind::shared, "transposed() of a distributed layout");
  return shared(vec, per_phase, max_phase, {order[1], order[0]}, block);
}

int Layout::rank() const {
  switch (kind) {
    case Kind::blocked:
      return static_cast<int>(size_per_thread.size());
    case Kind::mma:
    case Kind::dot_operand:
    case Kind::shared:
      return 2;
    case Kind::slice:
      return parent->rank() - 1;
  }
  return 0;
}

int64_t Layout::num_warps() const {
  switch (kind) {
    case Kind::blocked:
    case Kind::mma:
      return product(warps_per_cta);
    case Kind::dot_operand:
    case Kind::slice:
      return parent->num_warps();
    case Kind::shared:
      return 0;
  }
  return 0;
}

int64_t Layout::warp_size() const {
  switch (kind) {
    case Kind::blocked:
      return product(threads_per_warp);
    case Kind::mma:
      return mma == MmaKind::mfma ? 64 : 32;
    case Kind::dot_operand:
    case Kind::slice:
      return parent->warp_size();
    case Kind::shared:
      return 0;
  }
  return 0;
}

// ---- text

std::string Layout::str() const {
  switch (kind) {
    case Kind::blocked:
      return str_cat("#blocked<spt = ", shape_str(size_per_thread), ", tpw = ", shape_str(threads_per_warp),
                     ", wpc = ", shape_str(warps_per_cta), ", order = ", shape_str(order), ">");
    case Kind::mma:
      return str_cat("#mma<", mma_kind_name(mma), ", wpc = ", shape_str(warps_per_cta),
                     ", instr = ", shape_str(instr_shape), ">");
    case Kind::dot_operand:
      return str_cat("#dot_op<", op_index == 0 ? "a" : "b", ", ", parent->str(), ", k_width = ", k_width, ">");
    case Kind::slice:
      return str_cat("#slice<dim = ", dim, ", ", parent->str(), ">");
    case Kind::shared:
      return str_cat("#shared<vec = ", vec, ", per_phase = ", per_phase, ", max_phase = ", max_phase,
                     ", order = ", shape_str(order), block ? str_cat(", block = ", block) : std::string(), ">");
  }
  return "#?";
}

bool Layout::operator==(const Layout& o) const {
  return kind == o.kind && size_per_thread == o.size_per_thread && threads_per_warp == o.threads_per_warp &&
         warps_per_cta == o.warps_per_cta && order == o.order && mma == o.mma && instr_shape == o.instr_shape &&
         op_index == o.op_index && k_width == o.k_width && dim == o.dim && same_layout(parent, o.parent) &&
         vec == o.vec && per_phase == o.per_phase && max_phase == o.max_phase && block == o.block;
}

bool same_layout(const LayoutRef& a, const LayoutRef& b) {
  if (a == b) return true;
  return a && b && *a == *b;
}

namespace {

class LayoutParser {
 public:
  LayoutParser(const std::string& s, size_t& pos) : s_(s), pos_(pos) {}

  LayoutRef layout() {
    expect("#");
    std::string kind = word();
    expect("<");
    LayoutRef l;
    if (kind == "blocked") {
      auto spt = named_ints("spt");
      expect(",");
      auto tpw = named_ints("tpw");
      expect(",");
      auto wpc = named_ints("wpc");
      expect(",");
      auto order = named_ints("order");
      l = Layout::blocked(spt, tpw, wpc, order);
    } else if (kind == "mma") {
      std::string k = word();
      MmaKind mk = k == "mma_sync" ? MmaKind::mma_sync
                   : k == "wgmma"  ? MmaKind::wgmma
                   : k == "mfma"   ? MmaKind::mfma
                                   : unknown_mma(k);
      expect(",");
      auto wpc = named_ints("wpc");
      expect(",");
      auto instr = named_ints("instr");
      l = Layout::mma_acc(mk, wpc, instr);
    } else if (kind == "dot_op") {
      std::string which = word();
      if (which != "a" && which != "b") bad(str_cat("dot_op: the operand is 'a' or 'b', not '", which, "'"));
      expect(",");
      LayoutRef parent = layout();
      expect(",");
      int kw = static_cast<int>(named_int("k_width"));
      l = Layout::dot_operand(which == "a" ? 0 : 1, parent, kw);
    } else if (kind == "slice") {
      int dim = static_cast<int>(named_int("dim"));
      expect(",");
      l = Layout::slice(dim, layout());
    } else if (kind == "shared") {
      int vec = static_cast<int>(named_int("vec"));
      expect(",");
      int pp = static_cast<int>(named_int("per_phase"));
      expect(",");
      int mp = static_cast<int>(named_int("max_phase"));
      expect(",");
      std::vector<int64_t> order = named_ints("order");
      int64_t block = 0;
      if (accept(',')) block = named_int("block");
      l = Layout::shared(vec, pp, mp, std::move(order), block);
    } else {
      bad(str_cat("unknown layout '#", kind, "' (known: #blocked, #mma, #dot_op, #slice, #shared)"));
    }
    expect(">");
    return l;
  }

 private:
  [[noreturn]] static MmaKind unknown_mma(const std::string& k) {
    bad(str_cat("unknown mma kind '", k, "' (known: mma_sync, wgmma, mfma)"));
  }
  void skip() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t')) ++pos_;
  }
  bool accept(char c) {
    skip();
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }
  void expect(const char* tok) {
    skip();
    if (s_.compare(pos_, std::char_traits<char>::length(tok), tok) != 0)
      bad(str_cat("expected '", tok, "' in a layout"));
    pos_ += std::char_traits<char>::length(tok);
  }
  std::string word() {
    skip();
    size_t b = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
    if (b == pos_) bad("expected a name in a layout");
    return s_.substr(b, pos_ - b);
  }
  int64_t integer() {
    skip();
    size_t b = pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    if (b == pos_) bad("expected an integer in a layout");
    if (pos_ - b > 7) bad(str_cat("the integer ", s_.substr(b, pos_ - b), " is too large for a layout"));
    return std::stoll(s_.substr(b, pos_ - b));
  }
  void key(const char* name) {
    if (word() != name) bad(str_cat("expected '", name, " =' in a layout"));
    expect("=");
  }
  int64_t named_int(const char* name) {
    key(name);
    return integer();
  }
  std::vector<int64_t> named_ints(const char* name) {
    key(name);
    expect("[");
    std::vector<int64_t> v;
    if (!accept(']')) {
      do v.push_back(integer());
      while (accept(','));
      expect("]");
    }
    return v;
  }

  const std::string& s_;
  size_t& pos_;
};

}  // namespace

LayoutRef parse_layout(const std::string& text, size_t& pos) { return LayoutParser(text, pos).layout(); }

// ---- linear maps

namespace {

using Basis = std::vector<int64_t>;
using Bases = std::vector<Basis>;

Basis unit(size_t rank, size_t d, int64_t v) {
  Basis b(rank, 0);
  b[d] = v;
  return b;
}

/// Keeps the tensor's coordinates in range: a register basis that leaves it is dropped (the
/// register would repeat another), a lane's or warp's becomes zero (they hold the same elements).
void fit(LinearLayout& ll) {
  for (int in = 0; in < static_cast<int>(ll.bases.size()); ++in) {
    Bases kept;
    for (Basis b : ll.bases[in]) {
      bool out = false;
      for (size_t d = 0; d < b.size(); ++d) out |= b[d] >= ll.shape[d];
      if (out && in == LinearLayout::reg) continue;
      if (out) std::fill(b.begin(), b.end(), 0);
      kept.push_back(b);
    }
    ll.bases[in] = std::move(kept);
  }
}

/// Register bases repeating `tile` (per dimension, in `dims` order) until the shape is covered.
void repeat(Bases& regs, const std::vector<int64_t>& shape, const std::vector<int64_t>& tile,
            const std::vector<int64_t>& dims) {
  for (int64_t d : dims)
    for (int64_t v = tile[d]; v < shape[d]; v *= 2) regs.push_back(unit(shape.size(), d, v));
}

/// The warp tile of a 2-D mma-like layout on `shape`: each warp's contiguous share, or one
/// instruction's tile where the tensor is smaller than that (its warps then hold copies: a
/// [M, 1] column broadcast to [M, N] is held where the rows of the [M, N] tensor are).
std::vector<int64_t> warp_tile(const Layout& mma, const std::vector<int64_t>& shape,
                               const std::vector<int64_t>& least) {
  return {std::max(shape[0] / mma.warps_per_cta[0], least[0]), std::max(shape[1] / mma.warps_per_cta[1], least[1])};
}

/// Warp bases of a 2-D layout whose warps form mma's grid (w % wn along columns, w / wn along
/// rows), with `keep_n`/`keep_m` false where the operand is the same for every warp along it.
void warp_grid(LinearLayout& ll, const Layout& mma, const std::vector<int64_t>& wt, bool keep_m, bool keep_n) {
  Bases& w = ll.bases[LinearLayout::warp];
  for (int b = 0; b < log2_of(mma.warps_per_cta[1]); ++b) w.push_back(keep_n ? Basis{0, wt[1] << b} : Basis{0, 0});
  for (int b = 0; b < log2_of(mma.warps_per_cta[0]); ++b) w.push_back(keep_m ? Basis{wt[0] << b, 0} : Basis{0, 0});
}

LinearLayout blocked_linear(const Layout& l, const std::vector<int64_t>& shape) {
  size_t rank = shape.size();
  LinearLayout ll{shape, {{}, {}, {}}};
  std::vector<int64_t> tile(rank);
  for (int64_t d : l.order) {
    for (int b = 0; b < log2_of(l.size_per_thread[d]); ++b) ll.bases[0].push_back(unit(rank, d, int64_t{1} << b));
    tile[d] = l.size_per_thread[d] * l.threads_per_warp[d] * l.warps_per_cta[d];
  }
  for (int64_t d : l.order)
    for (int b = 0; b < log2_of(l.threads_per_warp[d]); ++b)
      ll.bases[1].push_back(unit(rank, d, l.size_per_thread[d] << b));
  for (int64_t d : l.order)
    for (int b = 0; b < log2_of(l.warps_per_cta[d]); ++b)
      ll.bases[2].push_back(unit(rank, d, (l.size_per_thread[d] * l.threads_per_warp[d]) << b));
  repeat(ll.bases[0], shape, tile, l.order);
  fit(ll);
  return ll;
}

/// The smallest extent of dimension d a layout can map (a slice's parent is laid over it).
int64_t least_extent(const Layout& l, int d) {
  switch (l.kind) {
    case Layout::Kind::blocked:
      return 1;
    case Layout::Kind::mma: {
      int64_t side = l.mma == MmaKind::mfma ? l.instr_shape[0] : (d == 0 ? 16 : 8);
      return side * l.warps_per_cta[d];
    }
    case Layout::Kind::dot_operand: {
      const Layout& p = *l.parent;
      bool mfma = p.mma == MmaKind::mfma;
      int64_t k = mfma ? l.k_width * (64 / p.instr_shape[0]) : 8 * l.k_width;
      int non_k = l.op_index == 0 ? 0 : 1;
      if (d != non_k) return k;
      return (mfma ? p.instr_shape[0] : (non_k == 0 ? 16 : 8)) * p.warps_per_cta[non_k];
    }
    case Layout::Kind::slice:
      return least_extent(*l.parent, d >= l.dim ? d + 1 : d);
    case Layout::Kind::shared:
      return 1;
  }
  return 1;
}

LinearLayout mma_linear(const Layout& l, const std::vector<int64_t>& shape) {
  LinearLayout ll{shape, {{}, {}, {}}};
  Bases& r = ll.bases[0];
  Bases& ln = ll.bases[1];
  if (l.mma == MmaKind::mfma) {
    int64_t S = l.instr_shape[0];
    auto wt = warp_tile(l, shape, {S, S});
    r = {{1, 0}, {2, 0}};  // a lane's registers: 4 consecutive rows, then every 4 (64 / S) rows
    for (int64_t v = 4 * (64 / S); v < S; v *= 2) r.push_back({v, 0});
    for (int64_t v = 1; v < S; v *= 2) ln.push_back({0, v});             // lane % S: the column
    for (int64_t v = 4; v < 4 * (64 / S); v *= 2) ln.push_back({v, 0});  // lane / S: 4 rows each
    repeat(r, wt, {S, S}, {1, 0});
    warp_grid(ll, l, wt, true, true);
  } else if (const int64_t rows = 16 * l.warps_per_cta[0]; l.mma == MmaKind::wgmma && shape[0] > rows) {
    // More rows than one wgmma of each warpgroup (64 rows) holds: each further instruction
    // takes the next `rows`, its registers after the first's (a warp's 16 rows of every one).
    ll = mma_linear(l, {rows, shape[1]});
    ll.shape = shape;
    repeat(ll.bases[LinearLayout::reg], shape, {rows, shape[1]}, {0});
    return ll;
  } else {  // mma.sync's 16x8 fragment; wgmma's warps each hold 16 rows of it
    auto wt = warp_tile(l, shape, {16, 8});
    r = {{0, 1}, {8, 0}};
    ln = {{0, 2}, {0, 4}, {1, 0}, {2, 0}, {4, 0}};
    repeat(r, wt, {16, 8}, {1, 0});
    warp_grid(ll, l, wt, true, true);
  }
  fit(ll);
  return ll;
}

LinearLayout dot_operand_linear(const Layout& l, const std::vector<int64_t>& shape) {
  const Layout& p = *l.parent;
  LinearLayout ll{shape, {{}, {}, {}}};
  Bases& r = ll.bases[0];
  Bases& ln = ll.bases[1];
  const int64_t kw = l.k_width;
  const bool a = l.op_index == 0;
  const int kd = a ? 1 : 0, nd = a ? 0 : 1;  // K's dimension and the other's
  auto along = [&](int d, int64_t v) { return unit(2, d, v); };
  std::vector<int64_t> instr(2);
  if (p.mma == MmaKind::mfma) {
    int64_t S = p.instr_shape[0];
    instr[nd] = S, instr[kd] = kw * (64 / S);
    for (int64_t v = 1; v < kw; v *= 2) r.push_back(along(kd, v));
    for (int64_t v = 1; v < S; v *= 2) ln.push_back(along(nd, v));           // lane % S: the row (A) or column (B)
    for (int64_t v = kw; v < instr[kd]; v *= 2) ln.push_back(along(kd, v));  // lane / S: the K group
  } else {
    instr[nd] = a ? 16 : 8, instr[kd] = 8 * kw;
    for (int64_t v = 1; v < kw; v *= 2) r.push_back(along(kd, v));
    if (a) r.push_back({8, 0});                                                         // a2, a3: rows g + 8
    r.push_back(along(kd, 4 * kw));                                                     // the second half of K
    ln = {along(kd, kw), along(kd, 2 * kw), along(nd, 1), along(nd, 2), along(nd, 4)};  // lane % 4: K; lane / 4: M or N
  }
  std::vector<int64_t> least = {0, 0};
  least[nd] = instr[nd], least[kd] = 1;
  std::vector<int64_t> wt = warp_tile(p,
                                      a ? std::vector<int64_t>{shape[0], shape[1] * p.warps_per_cta[1]}
                                        : std::vector<int64_t>{shape[0] * p.warps_per_cta[0], shape[1]},
                                      least);
  wt[kd] = shape[kd];
  repeat(r, wt, instr, {static_cast<int64_t>(kd), static_cast<int64_t>(nd)});
  warp_grid(ll, p, wt, a, !a);
  fit(ll);
  return ll;
}

LinearLayout slice_linear(const Layout& l, const std::vector<int64_t>& shape) {
  std::vector<int64_t> full = shape;
  full.insert(full.begin() + l.dim, least_extent(*l.parent, l.dim));
  LinearLayout p = to_linear(*l.parent, full);
  LinearLayout ll{shape, {{}, {}, {}}};
  for (int in = 0; in < 3; ++in)
    for (Basis b : p.bases[in]) {
      bool moved_only_dim = b[l.dim] != 0 && std::count(b.begin(), b.end(), 0) == static_cast<long>(b.size()) - 1;
      b.erase(b.begin() + l.dim);
      if (moved_only_dim && in == LinearLayout::reg) continue;  // registers along the removed dimension: one left
      ll.bases[in].push_back(b);
    }
  return ll;
}

LinearLayout shared_linear(const Layout& l, const std::vector<int64_t>& shape) {
  const int inner = static_cast<int>(l.order[0]), outer = 1 - inner;
  const int64_t cols = shape[inner];
  const int64_t width = l.block ? std::min(l.block, cols) : cols;  // of a stored row
  if (l.vec * l.max_phase > width)
    bad(str_cat(l.str(), " on a ", shape[0], "x", shape[1], " tensor: ", l.max_phase, " phases of ", l.vec,
                " elements exceed a row of ", width));
  LinearLayout ll{shape, {{}}};
  for (int64_t v = 1; v < width; v *= 2) ll.bases[0].push_back(unit(2, inner, v));
  for (int64_t v = 1; v < shape[outer]; v *= 2) {
    Basis b = unit(2, outer, v);
    b[inner] = l.vec * ((v / l.per_phase) % l.max_phase);  // the row's phase, XORed into its chunk
    ll.bases[0].push_back(b);
  }
  for (int64_t v = width; v < cols; v *= 2) ll.bases[0].push_back(unit(2, inner, v));  // the column blocks
  return ll;
}

/// Coordinates as one bit string (dimension 0's bits highest): XOR of coordinates is XOR of these.
uint64_t flat(const Basis& b, const std::vector<int64_t>& shape) {
  uint64_t v = 0;
  for (size_t d = 0; d < b.size(); ++d) v = (v << log2_of(shape[d])) | static_cast<uint64_t>(b[d]);
  return v;
}

/// A basis of the span of `vs` over GF(2), each with a distinct leading bit.
struct Span {
  std::vector<uint64_t> rows;
  uint64_t reduce(uint64_t v) const {
    for (uint64_t r : rows) v = std::min(v, v ^ r);
    return v;
  }
  bool add(uint64_t v) {
    v = reduce(v);
    if (!v) return false;
    rows.push_back(v);
    std::sort(rows.rbegin(), rows.rend());
    return true;
  }
  bool holds(uint64_t v) const { return reduce(v) == 0; }
};

Span span_of(const LinearLayout& ll, std::initializer_list<int> ins) {
  Span s;
  for (int in : ins)
    for (const Basis& b : ll.bases[in]) s.add(flat(b, ll.shape));
  return s;
}

/// Whether every thread's elements under `to` are among those it holds under `from`, once the
/// bases of `within` (registers; or registers and lanes) may be mixed in.
bool reachable(const LinearLayout& from, const LinearLayout& to, std::initializer_list<int> within) {
  Span s = span_of(from, within);
  for (const Basis& b : to.bases[LinearLayout::reg])
    if (!s.holds(flat(b, to.shape))) return false;
  for (int in = 1; in < 3; ++in) {
    if (from.bases[in].size() != to.bases[in].size()) return false;
    bool mixed = std::find(within.begin(), within.end(), in) != within.end();
    for (size_t i = 0; i < to.bases[in].size(); ++i) {
      uint64_t diff = flat(from.bases[in][i], from.shape) ^ flat(to.bases[in][i], to.shape);
      if (!mixed && !s.holds(diff)) return false;
    }
  }
  return true;
}

}  // namespace

std::vector<int64_t> LinearLayout::apply(const std::vector<int64_t>& inputs) const {
  std::vector<int64_t> c(shape.size(), 0);
  for (size_t in = 0; in < bases.size() && in < inputs.size(); ++in)
    for (size_t bit = 0; bit < bases[in].size(); ++bit)
      if ((inputs[in] >> bit) & 1)
        for (size_t d = 0; d < c.size(); ++d) c[d] ^= bases[in][bit][d];
  return c;
}

bool LinearLayout::covers_once() const {
  int64_t bits = 0;
  for (int64_t s : shape) bits += log2_of(s);
  Span s;
  int64_t independent = 0;
  for (size_t in = 0; in < bases.size(); ++in)
    for (const Basis& b : bases[in]) {
      uint64_t v = flat(b, shape);
      if (!v && in == reg) return false;  // a register holding what another holds
      if (v && !s.add(v)) return false;   // a basis that repeats the others
      independent += v != 0;
    }
  return independent == bits;
}

std::array<int64_t, 3> LinearLayout::duplicate_bits() const {
  std::array<int64_t, 3> dup{};
  Span s;
  for (size_t in = 0; in < bases.size() && in < dup.size(); ++in)
    for (size_t bit = 0; bit < bases[in].size(); ++bit)
      if (!s.add(flat(bases[in][bit], shape))) dup[in] |= int64_t{1} << bit;
  return dup;
}

LinearLayout to_linear(const Layout& layout, const std::vector<int64_t>& shape) {
  if (static_cast<int>(shape.size()) != layout.rank())
    bad(str_cat(layout.str(), " describes rank-", layout.rank(), " tensors, not ", shape_str(shape)));
  for (int64_t s : shape)
    if (!pow2(s)) bad(str_cat("a layout maps power-of-two shapes, not ", shape_str(shape)));
  switch (layout.kind) {
    case Layout::Kind::blocked:
      return blocked_linear(layout, shape);
    case Layout::Kind::mma:
      return mma_linear(layout, shape);
    case Layout::Kind::dot_operand:
      return dot_operand_linear(layout, shape);
    case Layout::Kind::slice:
      return slice_linear(layout, shape);
    case Layout::Kind::shared:
      return shared_linear(layout, shape);
  }
  bad("unknown layout kind");
}

ConvertCost convert_cost(const Layout& from, const Layout& to, const std::vector<int64_t>& shape) {
  if (from == to) return ConvertCost::none;
  if (!from.is_distributed() || !to.is_distributed()) return ConvertCost::shared_memory;
  LinearLayout a = to_linear(from, shape), b = to_linear(to, shape);
  if (a == b) return ConvertCost::none;
  if (reachable(a, b, {LinearLayout::reg})) return ConvertCost::registers;
  if (reachable(a, b, {LinearLayout::reg, LinearLayout::lane})) return ConvertCost::warp_shuffle;
  return ConvertCost::shared_memory;
}

int64_t contiguous_registers(const LinearLayout& ll, int dim) {
  int64_t n = 1;
  for (const Basis& b : ll.bases[LinearLayout::reg]) {
    if (b != unit(ll.shape.size(), dim, n)) break;
    n *= 2;
  }
  return n;
}

ReducePlan reduce_plan(const LinearLayout& ll, int dim) {
  ReducePlan plan;
  if (ll.bases.size() != 3) return ReducePlan{{}, {}, {}, true};  // (a shared layout: no threads to reduce over)
  auto along = [&](const Basis& b) {                              // 1: only along dim; 0: not along it; -1: mixed
    bool on = b[dim] != 0, off = false;
    for (size_t d = 0; d < b.size(); ++d) off |= d != static_cast<size_t>(dim) && b[d] != 0;
    return on && off ? -1 : on ? 1 : 0;
  };
  const Bases& regs = ll.bases[LinearLayout::reg];
  std::vector<int> reduced, kept;  // register bits
  for (int bit = 0; bit < static_cast<int>(regs.size()); ++bit) {
    int a = along(regs[bit]);
    if (a < 0) return ReducePlan{{}, {}, {}, true};
    (a ? reduced : kept).push_back(bit);
  }
  for (int64_t j = 0; j < (int64_t{1} << kept.size()); ++j) {
    int64_t base = 0;
    for (size_t k = 0; k < kept.size(); ++k)
      if ((j >> k) & 1) base |= int64_t{1} << kept[k];
    std::vector<int64_t> group;
    for (int64_t i = 0; i < (int64_t{1} << reduced.size()); ++i) {
      int64_t r = base;
      for (size_t k = 0; k < reduced.size(); ++k)
        if ((i >> k) & 1) r |= int64_t{1} << reduced[k];
      group.push_back(r);
    }
    plan.groups.push_back(group);
  }
  for (int in : {LinearLayout::lane, LinearLayout::warp})
    for (int bit = 0; bit < static_cast<int>(ll.bases[in].size()); ++bit) {
      int a = along(ll.bases[in][bit]);
      if (a < 0) return ReducePlan{{}, {}, {}, true};
      if (a == 0) continue;  // another dimension, or a copy
      if (in == LinearLayout::lane)
        plan.lane_xor.push_back(int64_t{1} << bit);
      else
        plan.warp_bits.push_back(bit);
    }
  return plan;
}

std::optional<std::vector<int64_t>> register_permutation(const LinearLayout& from, const LinearLayout& to) {
  if (from.bases.size() != 3 || to.bases.size() != 3) return std::nullopt;  // (shared layouts: no registers)
  if (from.shape != to.shape || from.bases[LinearLayout::lane] != to.bases[LinearLayout::lane] ||
      from.bases[LinearLayout::warp] != to.bases[LinearLayout::warp])
    return std::nullopt;
  std::map<std::vector<int64_t>, int64_t> held;  // coordinates of each of `from`'s registers
  for (int64_t r = 0; r < from.in_size(LinearLayout::reg); ++r) held.emplace(from.coords(r, 0, 0), r);
  std::vector<int64_t> perm;
  for (int64_t j = 0; j < to.in_size(LinearLayout::reg); ++j) {
    auto it = held.find(to.coords(j, 0, 0));
    if (it == held.end()) return std::nullopt;
    perm.push_back(it->second);
  }
  return perm;
}

}  // namespace tiledist::ir
