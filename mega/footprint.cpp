// A program's footprint (mega/footprint.h): the traced IR interpreted once over sets of
// integers `c + Σ s·[0, n)` instead of integers, every memory op's address turned into byte
// ranges of its parameter.
#include "mega/footprint.h"

#include <algorithm>
#include <map>

namespace tiledist::mega {

namespace {

constexpr int kNoRoot = -1;     // not a pointer
constexpr int kManyRoots = -2;  // a pointer from more than one parameter, or from memory
constexpr size_t kMaxTerms = 8;
// A loop of at most this many trips, their number known, is walked trip by trip.
constexpr int64_t kWalkTrips = 8;
constexpr int64_t kMaxRanges = 4096;  // ranges an access may enumerate before taking their hull

// stride · [0, count): the multiples of an index j that `id` names (an arange's, a loop's
// iteration), along tensor axis `axis` (-1: the same for every element; kNoAxis: not known).
struct Term {
  int64_t stride = 0, count = 0;
  int id = 0, axis = -1;
  bool operator==(const Term&) const = default;
};
constexpr int kNoAxis = -2;

// Where a mask is false: every element whose index j (of term `id` along `axis`) is ≥ limit.
struct Clip {
  int id = 0, axis = 0;
  int64_t limit = 0;
};

// A set of integers (an offset in bytes, for a pointer from parameter `root`): [lo, hi] plus
// each term's multiples; `top`: anything.
struct Abs {
  bool top = false;
  int64_t lo = 0, hi = 0;
  std::vector<Term> terms;
  int root = kNoRoot;
  bool exact() const { return !top && lo == hi && terms.empty(); }
  bool operator==(const Abs&) const = default;
};

Abs top(int root = kNoRoot) {
  Abs a;
  a.top = true, a.root = root;
  return a;
}
Abs exact(int64_t v) {
  Abs a;
  a.lo = a.hi = v;
  return a;
}
Abs range(int64_t lo, int64_t hi) {
  Abs a;
  a.lo = lo, a.hi = hi;
  return a;
}
int merge_roots(int a, int b) { return a == b ? a : a == kNoRoot ? b : b == kNoRoot ? a : kManyRoots; }

// The least and greatest element; false where unbounded (or past int64).
bool bounds(const Abs& a, int64_t& mn, int64_t& mx) {
  if (a.top) return false;
  mn = a.lo, mx = a.hi;
  for (const Term& t : a.terms) {
    int64_t span = 0;
    if (__builtin_mul_overflow(t.stride, t.count - 1, &span)) return false;
    if (__builtin_add_overflow(span < 0 ? mn : mx, span, span < 0 ? &mn : &mx)) return false;
  }
  return true;
}
Abs hull(const Abs& a) {
  int64_t mn = 0, mx = 0;
  return bounds(a, mn, mx) ? range(mn, mx) : top(a.root);
}
Abs add(const Abs& a, const Abs& b) {
  const int root = merge_roots(a.root, b.root);
  if (a.top || b.top) return top(root);
  Abs r;
  r.root = root;
  if (__builtin_add_overflow(a.lo, b.lo, &r.lo) || __builtin_add_overflow(a.hi, b.hi, &r.hi)) return top(root);
  r.terms = a.terms;
  r.terms.insert(r.terms.end(), b.terms.begin(), b.terms.end());
  if (r.terms.size() > kMaxTerms) {
    Abs h = hull(r);
    h.root = root;
    return h;
  }
  return r;
}
Abs scale(const Abs& a, int64_t k) {
  if (a.top) return top(a.root);
  if (k == 0) return exact(0);
  Abs r;
  int64_t x = 0, y = 0;
  if (__builtin_mul_overflow(a.lo, k, &x) || __builtin_mul_overflow(a.hi, k, &y)) return top();
  r.lo = std::min(x, y), r.hi = std::max(x, y);
  for (const Term& t : a.terms) {
    Term s = t;
    if (__builtin_mul_overflow(t.stride, k, &s.stride)) return top();
    r.terms.push_back(s);
  }
  return r;
}
Abs mul(const Abs& a, const Abs& b) {
  if (b.exact()) return scale(a, b.lo);
  if (a.exact()) return scale(b, a.lo);
  int64_t a0 = 0, a1 = 0, b0 = 0, b1 = 0;
  if (!bounds(a, a0, a1) || !bounds(b, b0, b1)) return top();
  int64_t c[4];
  for (int i = 0; i < 4; ++i)
    if (__builtin_mul_overflow(i & 1 ? a1 : a0, i & 2 ? b1 : b0, &c[i])) return top();
  return range(*std::min_element(c, c + 4), *std::max_element(c, c + 4));
}
Abs join(const Abs& a, const Abs& b) {
  const int root = merge_roots(a.root, b.root);
  if (a.top || b.top) return top(root);
  if (a.terms == b.terms) {
    Abs r = a;
    r.lo = std::min(a.lo, b.lo), r.hi = std::max(a.hi, b.hi), r.root = root;
    return r;
  }
  int64_t a0 = 0, a1 = 0, b0 = 0, b1 = 0;
  if (!bounds(a, a0, a1) || !bounds(b, b0, b1)) return top(root);
  Abs r = range(std::min(a0, b0), std::max(a1, b1));
  r.root = root;
  return r;
}

// Whether `o` (an op of the program) sits inside block `b`, at any depth.
bool inside(const ir::Op* o, const ir::Block* b) {
  for (const ir::Block* at = o ? o->parent : nullptr; at; at = at->parent ? at->parent->parent : nullptr)
    if (at == b) return true;
  return false;
}
// Whether `v` may differ between iterations of a loop whose body is `body`.
bool varies_in(const ir::Value* v, const ir::Block* body) {
  if (!v->def) return v->owner == body || (v->owner && v->owner->parent && inside(v->owner->parent, body));
  if (!inside(v->def, body)) return false;
  if (!v->def->regions.empty()) return true;  // (a loop's or branch's result inside the body: not followed)
  for (const ir::Value* o : v->def->operands)
    if (varies_in(o, body)) return true;
  return false;
}

class Interpreter {
 public:
  Interpreter(const ir::Function& f, const std::vector<LaunchArg>& args, const std::array<int, 3>& program,
              const std::array<int, 3>& grid, int rank, int ranks)
      : program_(program), grid_(grid), rank_(rank), ranks_(ranks), out_(f.body.args.size()) {
    for (size_t i = 0; i < f.body.args.size(); ++i) {
      const ir::Value* v = f.body.args[i].get();
      Abs a = exact(0);
      if (v->type.is_ptr) {
        a.root = int(i);
      } else if (i < args.size() && args[i].kind == LaunchArg::Kind::integer && v->type.is_int()) {
        a = exact(args[i].i);
      } else {
        a = top();
      }
      env_[v] = a;
    }
  }
  std::vector<Footprint> run(const ir::Function& f) {
    block(f.body);
    for (Footprint& fp : out_) normalize(fp.reads), normalize(fp.writes);
    return std::move(out_);
  }

 private:
  const Abs& get(const ir::Value* v) {
    auto it = env_.find(v);
    if (it == env_.end()) it = env_.emplace(v, top(v->type.is_ptr ? kManyRoots : kNoRoot)).first;
    return it->second;
  }
  void set(const ir::Value* v, Abs a) {
    if (v->type.is_float()) a = top();
    env_[v] = std::move(a);
  }
  void block(const ir::Block& b) {
    for (const auto& o : b.ops) op(*o);
  }
  std::vector<Abs> yielded(const ir::Block& b) {
    std::vector<Abs> out;
    if (const ir::Op* t = b.terminator())
      for (const ir::Value* v : t->operands) out.push_back(get(v));
    return out;
  }

  static void normalize(Ranges& r) {
    std::sort(r.begin(), r.end());
    Ranges merged;
    for (const auto& x : r) {
      if (!merged.empty() && x.first <= merged.back().second)
        merged.back().second = std::max(merged.back().second, x.second);
      else
        merged.push_back(x);
    }
    r = std::move(merged);
  }

  // The bytes `width` wide at each offset of `off`: false where unbounded.
  static bool to_ranges(const Abs& off, int64_t width, Ranges& out) {
    if (off.top || width <= 0) return false;
    int64_t base = off.lo;
    std::vector<Term> terms = off.terms;
    if (off.hi > off.lo) terms.push_back({1, off.hi - off.lo + 1});
    std::vector<Term> kept;
    for (Term t : terms) {
      if (t.count <= 1 || t.stride == 0) continue;
      if (t.stride < 0) {
        int64_t shift = 0;
        if (__builtin_mul_overflow(t.stride, t.count - 1, &shift) || __builtin_add_overflow(base, shift, &base))
          return false;
        t.stride = -t.stride;
      }
      kept.push_back(t);
    }
    std::sort(kept.begin(), kept.end(), [](const Term& a, const Term& b) { return a.stride < b.stride; });
    // The innermost terms that leave no gap make one contiguous run of `run` bytes; the rest
    // (from first_outer) repeat it.
    int64_t run = width;
    size_t first_outer = 0;
    for (; first_outer < kept.size() && kept[first_outer].stride <= run; ++first_outer) {
      int64_t span = 0;
      const Term& t = kept[first_outer];
      if (__builtin_mul_overflow(t.stride, t.count - 1, &span) || __builtin_add_overflow(run, span, &run)) return false;
    }
    int64_t combos = 1;
    for (size_t i = first_outer; i < kept.size(); ++i)
      if (__builtin_mul_overflow(combos, kept[i].count, &combos) || combos > kMaxRanges) combos = kMaxRanges + 1;
    if (combos > kMaxRanges) {
      int64_t end = base;
      for (size_t i = first_outer; i < kept.size(); ++i) {
        int64_t span = 0;
        if (__builtin_mul_overflow(kept[i].stride, kept[i].count - 1, &span) || __builtin_add_overflow(end, span, &end))
          return false;
      }
      int64_t stop = 0;
      if (__builtin_add_overflow(end, run, &stop)) return false;
      out.emplace_back(base, stop);
      return true;
    }
    std::vector<int64_t> at(kept.size() - first_outer, 0);
    for (int64_t k = 0; k < combos; ++k) {
      int64_t start = base;
      for (size_t i = 0; i < at.size(); ++i) start += kept[first_outer + i].stride * at[i];
      out.emplace_back(start, start + run);
      for (size_t i = 0; i < at.size() && ++at[i] == kept[first_outer + i].count; ++i) at[i] = 0;
    }
    return true;
  }

  // An access through `ptr` of `width` bytes at each of its addresses (-1: not known), where
  // `mask` (if any) holds: the indices it rules out taken from the address's terms.
  void access(const ir::Value* ptr, int64_t width, bool reads, bool writes, const ir::Value* mask = nullptr) {
    if (!recording_) return;
    Abs a = get(ptr);
    if (mask && !a.top) {
      auto it = clips_.find(mask);
      for (const Clip& c : it == clips_.end() ? std::vector<Clip>{} : it->second)
        for (Term& t : a.terms)
          if (t.id == c.id && t.axis == c.axis) t.count = std::max<int64_t>(0, std::min(t.count, c.limit));
      if (std::any_of(a.terms.begin(), a.terms.end(), [](const Term& t) { return t.count == 0; })) return;
    }
    auto mark = [&](size_t p, const Ranges* r) {
      Footprint& fp = out_[p];
      if (!r) {
        fp.bounded = false;
        return;
      }
      if (reads) fp.reads.insert(fp.reads.end(), r->begin(), r->end());
      if (writes) fp.writes.insert(fp.writes.end(), r->begin(), r->end());
    };
    if (a.root < 0) {  // (from several parameters, or from memory: any pointer parameter)
      for (size_t p = 0; p < out_.size(); ++p) mark(p, nullptr);
      return;
    }
    Ranges r;
    mark(size_t(a.root), width >= 0 && to_ranges(a, width, r) ? &r : nullptr);
  }

  void op(const ir::Op& o);
  void for_op(const ir::Op& o);

  std::array<int, 3> program_, grid_;
  int rank_, ranks_;
  std::vector<Footprint> out_;
  std::map<const ir::Value*, Abs> env_;
  std::map<const ir::Value*, std::vector<Clip>> clips_;  // (masks)
  bool recording_ = true;
  int next_id_ = 0;
};

void Interpreter::for_op(const ir::Op& o) {
  const ir::Block& body = *o.regions[0];
  const Abs &lb = get(o.operands[0]), &ub = get(o.operands[1]), &st = get(o.operands[2]);
  const bool known = lb.exact() && ub.exact() && st.exact() && st.lo > 0;
  const int64_t trips = known ? (ub.lo > lb.lo ? (ub.lo - lb.lo + st.lo - 1) / st.lo : 0) : -1;
  const size_t carried = o.operands.size() - 3;
  std::vector<Abs> inits;
  for (size_t i = 0; i < carried; ++i) inits.push_back(get(o.operands[3 + i]));
  if (trips == 0) {  // (the body never runs)
    for (size_t i = 0; i < carried; ++i) set(o.result(int(i)), inits[i]);
    return;
  }
  if (known && trips > 1 && trips <= kWalkTrips) {
    // Few trips: each walked with its induction variable exact (a persistent kernel's loop
    // over its program's tiles, where a tile's coordinates and K range are divisions and
    // selects of it that a strided term cannot follow), each trip's accesses its own.
    std::vector<Abs> now = inits;
    const ir::Op* yield = body.terminator();
    for (int64_t t = 0; t < trips; ++t) {
      set(body.args[0].get(), exact(lb.lo + t * st.lo));
      for (size_t i = 0; i < carried; ++i) set(body.args[1 + i].get(), now[i]);
      block(body);
      for (size_t i = 0; i < carried; ++i) now[i] = yield ? get(yield->operands.at(i)) : top(inits[i].root);
    }
    for (size_t i = 0; i < carried; ++i) set(o.result(int(i)), now[i]);
    return;
  }
  Abs iv = top();
  const int id = next_id_++;  // (the iteration: j of the induction variable and of what it carries)
  if (known) {                // (one trip: the value itself, which comparisons and selects then read exactly)
    iv = exact(lb.lo);
    if (trips > 1) iv.terms.push_back({st.lo, trips, id, -1});
  }
  // A carried value the body yields unchanged stays what it was; one it yields as itself plus
  // (pointer: offset by) an amount that is the same in every iteration takes each multiple of
  // it; anything else is unbounded.
  std::vector<Abs> args(carried), results(carried);
  const ir::Op* yield = body.terminator();
  {
    const bool saved = recording_;
    recording_ = false;
    set(body.args[0].get(), iv);
    for (size_t i = 0; i < carried; ++i) set(body.args[1 + i].get(), inits[i]);
    block(body);
    recording_ = saved;
  }
  for (size_t i = 0; i < carried; ++i) {
    const ir::Value* arg = body.args[1 + i].get();
    const ir::Value* y = yield ? yield->operands.at(i) : nullptr;
    args[i] = results[i] = top(inits[i].root);
    if (y == arg) {
      args[i] = results[i] = inits[i];
      continue;
    }
    if (!known || !y || !y->def || inits[i].top) continue;
    const ir::Op& d = *y->def;
    const ir::Value* step = nullptr;
    if (d.code == ir::OpCode::AddPtr && d.operands[0] == arg) step = d.operands[1];
    if (d.code == ir::OpCode::Add && (d.operands[0] == arg || d.operands[1] == arg))
      step = d.operands[0] == arg ? d.operands[1] : d.operands[0];
    if (!step || varies_in(step, &body) || step->type.is_tensor() != arg->type.is_tensor()) continue;
    Abs delta = get(step);
    if (!delta.exact()) continue;
    if (d.code == ir::OpCode::AddPtr) delta = scale(delta, std::max(1, ir::dtype_bytes(arg->type.dtype)));
    if (!delta.exact()) continue;
    Abs a = inits[i];
    a.terms.push_back({delta.lo, trips, id, -1});
    args[i] = a.terms.size() > kMaxTerms ? Abs(top(inits[i].root)) : a;
    int64_t shift = 0;
    Abs r = inits[i];
    if (!__builtin_mul_overflow(delta.lo, trips, &shift) && !__builtin_add_overflow(r.lo, shift, &r.lo) &&
        !__builtin_add_overflow(r.hi, shift, &r.hi))
      results[i] = r;
  }
  set(body.args[0].get(), iv);
  for (size_t i = 0; i < carried; ++i) set(body.args[1 + i].get(), args[i]);
  block(body);
  for (size_t i = 0; i < carried; ++i) set(o.result(int(i)), results[i]);
}

void Interpreter::op(const ir::Op& o) {
  using ir::OpCode;
  auto in = [&](size_t i) -> const Abs& { return get(o.operands.at(i)); };
  auto result = [&](Abs a) {
    if (!o.results.empty()) set(o.result(), std::move(a));
  };
  auto elem_bytes = [](const ir::Value* p) { return int64_t(std::max(1, ir::dtype_bytes(p->type.dtype))); };
  switch (o.code) {
    case OpCode::Constant:
      result(o.result()->type.is_int() ? exact(o.int_attr("value")) : top());
      return;
    case OpCode::ProgramId:
      result(exact(program_.at(size_t(o.int_attr("axis")))));
      return;
    case OpCode::NumPrograms:
      result(exact(grid_.at(size_t(o.int_attr("axis")))));
      return;
    case OpCode::Rank:
      result(rank_ >= 0 ? exact(rank_) : top());
      return;
    case OpCode::NumRanks:
      result(ranks_ >= 0 ? exact(ranks_) : top());
      return;
    case OpCode::Arange: {
      Abs a = exact(o.int_attr("start"));
      a.terms.push_back({1, o.int_attr("end") - o.int_attr("start"), next_id_++, 0});
      result(a);
      return;
    }
    case OpCode::ExpandDims:
    case OpCode::Broadcast:
    case OpCode::Reshape:
    case OpCode::Trans: {
      // (the axes terms and a mask's indices vary along, moved as the op moves them)
      auto moved = [&](int axis) -> int {
        if (axis < 0) return axis;
        if (o.code == OpCode::ExpandDims) return axis >= o.int_attr("axis") ? axis + 1 : axis;
        if (o.code == OpCode::Broadcast) return axis;
        if (o.code == OpCode::Trans) {
          const std::vector<int64_t>& perm = o.ints_attr("perm");
          for (size_t i = 0; i < perm.size(); ++i)
            if (perm[i] == axis) return int(i);
        }
        return kNoAxis;
      };
      Abs a = in(0);
      for (Term& t : a.terms) t.axis = moved(t.axis);
      auto it = clips_.find(o.operands[0]);
      if (it != clips_.end()) {
        std::vector<Clip> c;
        for (Clip k : it->second)
          if ((k.axis = moved(k.axis)) >= 0) c.push_back(k);
        clips_[o.result()] = c;
      }
      return result(a);
    }
    case OpCode::Splat:
    case OpCode::ConvertLayout:
    case OpCode::Hint:
    case OpCode::SymmAt:  // (a peer's copy of the buffer: the same offsets)
      result(in(0));
      return;
    case OpCode::Cast:
    case OpCode::Bitcast: {
      const ir::Type &from = o.operands[0]->type, &to = o.result()->type;
      if (from.is_ptr && to.is_ptr) return result(in(0));
      if (from.is_bool() && to.is_int()) return result(range(0, 1));
      return result(from.is_int() && to.is_int() && !to.is_bool() ? in(0) : top());
    }
    case OpCode::Add:
      return result(add(in(0), in(1)));
    case OpCode::Sub:
      return result(add(in(0), scale(in(1), -1)));
    case OpCode::Mul:
      return result(mul(in(0), in(1)));
    case OpCode::Shl:
      return result(in(1).exact() && in(1).lo >= 0 && in(1).lo < 62 ? scale(in(0), int64_t{1} << in(1).lo) : top());
    case OpCode::Not:
    case OpCode::Or:
    case OpCode::Xor: {  // (known scalars: the answer; a boolean otherwise 0 or 1)
      const bool is_bool = o.result()->type.is_bool(), scalar = !o.result()->type.is_tensor();
      if (scalar &&
          std::all_of(o.operands.begin(), o.operands.end(), [&](const ir::Value* v) { return get(v).exact(); })) {
        const int64_t u = in(0).lo;
        if (o.code == OpCode::Not) return result(exact(is_bool ? int64_t(u == 0) : ~u));
        return result(exact(o.code == OpCode::Or ? (u | in(1).lo) : (u ^ in(1).lo)));
      }
      return result(is_bool ? range(0, 1) : top());
    }
    case OpCode::Div:
    case OpCode::Shr:
    case OpCode::Rem:
    case OpCode::And:
    case OpCode::Min:
    case OpCode::Max: {
      // (two known values: the answer; booleans too, where scalar: a tensor's keep their clips)
      if (in(0).exact() && in(1).exact() && (!o.result()->type.is_bool() || !o.result()->type.is_tensor())) {
        const int64_t u = in(0).lo, v = in(1).lo;
        switch (o.code) {
          case OpCode::Div:
          case OpCode::Rem:
            if (v == 0 || (u == INT64_MIN && v == -1)) return result(top());
            return result(exact(o.code == OpCode::Div ? u / v : u % v));
          case OpCode::Shr:
            return result(u >= 0 && v >= 0 && v < 63 ? exact(u >> v) : top());  // (logical or arithmetic alike)
          case OpCode::And:
            return result(exact(u & v));
          default:
            return result(exact(o.code == OpCode::Min ? std::min(u, v) : std::max(u, v)));
        }
      }
      int64_t a0 = 0, a1 = 0, b0 = 0, b1 = 0;
      const bool a_ok = bounds(in(0), a0, a1), b_ok = bounds(in(1), b0, b1);
      const bool k = in(1).exact() && in(1).lo > 0;  // (a positive constant on the right)
      const int64_t K = in(1).lo;
      if (o.code == OpCode::Div && a_ok && k) return result(range(a0 / K, a1 / K));
      if (o.code == OpCode::Shr && a_ok && k && K < 63) return result(range(a0 >> K, a1 >> K));
      if (o.code == OpCode::Rem && a_ok && k)
        return result(a0 >= 0 && a1 < K ? in(0) : a0 >= 0 ? range(0, K - 1) : range(1 - K, K - 1));
      if (o.code == OpCode::And && o.result()->type.is_bool()) {  // (masks: false where either is)
        std::vector<Clip> c;
        for (const ir::Value* m : o.operands)
          if (auto it = clips_.find(m); it != clips_.end()) c.insert(c.end(), it->second.begin(), it->second.end());
        if (!c.empty()) clips_[o.result()] = c;
        return result(range(0, 1));
      }
      if (o.code == OpCode::And && b_ok && b0 >= 0) return result(range(0, a_ok && a0 >= 0 ? std::min(a1, b1) : b1));
      if (o.code == OpCode::Min && a_ok && b_ok) return result(range(std::min(a0, b0), std::min(a1, b1)));
      if (o.code == OpCode::Max && a_ok && b_ok) return result(range(std::max(a0, b0), std::max(a1, b1)));
      return result(top());
    }
    case OpCode::Cmp: {
      // x < b (or x <= b) where x is c + s·j (one term along an axis, s > 0) and b a constant:
      // false wherever j ≥ its limit.
      const std::string& pred = o.str_attr("pred");
      const Abs &x = in(0), &b = in(1);
      if (x.exact() && b.exact() && !o.result()->type.is_tensor()) {  // (two known scalars: the answer)
        const int64_t u = x.lo, v = b.lo;
        const int known = pred == "eq"   ? u == v
                          : pred == "ne" ? u != v
                          : pred == "lt" ? u < v
                          : pred == "le" ? u <= v
                          : pred == "gt" ? u > v
                          : pred == "ge" ? u >= v
                                         : -1;
        if (known >= 0) return result(exact(known));
      }
      if ((pred == "lt" || pred == "le" || pred == "slt" || pred == "sle") && !x.top && x.lo == x.hi &&
          x.terms.size() == 1 && x.terms[0].stride > 0 && x.terms[0].axis >= 0 && b.exact()) {
        const Term& t = x.terms[0];
        const int64_t room = b.lo - x.lo + (pred == "le" || pred == "sle" ? 1 : 0);  // (s·j < room)
        const int64_t limit = room <= 0 ? 0 : (room + t.stride - 1) / t.stride;
        clips_[o.result()] = {Clip{t.id, t.axis, limit}};
      }
      return result(range(0, 1));
    }
    case OpCode::Select:  // (a known condition: its side)
      if (in(0).exact()) return result(in(0).lo ? in(1) : in(2));
      return result(join(in(1), in(2)));
    case OpCode::AddPtr:
      return result(add(in(0), scale(in(1), elem_bytes(o.operands[0]))));
    case OpCode::Load:
      access(o.operands[0], elem_bytes(o.operands[0]), true, false, o.operands.size() > 1 ? o.operands[1] : nullptr);
      return result(top(o.result()->type.is_ptr ? kManyRoots : kNoRoot));
    case OpCode::Prefetch:  // (a hint: neither read nor written)
      return;
    case OpCode::Store:
      access(o.operands[0], elem_bytes(o.operands[0]), false, true, o.operands.size() > 2 ? o.operands[2] : nullptr);
      return;
    case OpCode::AtomicRMW:
    case OpCode::AtomicCAS:
      access(o.operands[0], elem_bytes(o.operands[0]), true, true);
      return result(top());
    case OpCode::Wait: {
      const Abs& n = in(1);
      access(o.operands[0], n.exact() && n.lo > 0 ? n.lo * elem_bytes(o.operands[0]) : -1, true, false);
      return result(top());
    }
    case OpCode::Memcpy: {
      int64_t lo = 0, hi = -1;
      if (!bounds(in(2), lo, hi)) hi = -1;
      access(o.operands[0], hi, false, true);
      access(o.operands[1], hi, true, false);
      return;
    }
    case OpCode::For:
      return for_op(o);
    case OpCode::If: {
      if (in(0).exact() && !o.operands[0]->type.is_tensor()) {  // (a known condition: its side alone)
        const ir::Block& taken = *o.regions[in(0).lo ? 0 : 1];
        block(taken);
        const std::vector<Abs> a = yielded(taken);
        for (size_t i = 0; i < o.results.size(); ++i) set(o.result(int(i)), i < a.size() ? a[i] : top());
        return;
      }
      block(*o.regions[0]);
      const std::vector<Abs> a = yielded(*o.regions[0]);
      block(*o.regions[1]);
      const std::vector<Abs> b = yielded(*o.regions[1]);
      for (size_t i = 0; i < o.results.size(); ++i)
        set(o.result(int(i)), i < a.size() && i < b.size() ? join(a[i], b[i]) : top());
      return;
    }
    case OpCode::While: {
      // (the trip count is not known: what the loop carries is unbounded, unless yielded unchanged)
      std::vector<Abs> carried;
      for (size_t i = 0; i < o.operands.size(); ++i) {
        const ir::Op* yield = o.regions[1]->terminator();
        const bool same = yield && yield->operands.at(i) == o.regions[1]->args.at(i).get() &&
                          o.regions[0]->terminator()->operands.at(i + 1) == o.regions[0]->args.at(i).get();
        carried.push_back(same ? in(i) : top(in(i).root));
      }
      for (size_t i = 0; i < carried.size(); ++i) {
        set(o.regions[0]->args[i].get(), carried[i]);
        set(o.regions[1]->args[i].get(), carried[i]);
      }
      block(*o.regions[0]);
      block(*o.regions[1]);
      for (size_t i = 0; i < o.results.size(); ++i) set(o.result(int(i)), carried[i]);
      return;
    }
    default:
      for (const auto& r : o.results) set(r.get(), top(r->type.is_ptr ? kManyRoots : kNoRoot));
      return;
  }
}

}  // namespace

std::vector<Footprint> footprints(const ir::Function& f, const std::vector<LaunchArg>& args,
                                  const std::array<int, 3>& program, const std::array<int, 3>& grid, int rank,
                                  int ranks) {
  return Interpreter(f, args, program, grid, rank, ranks).run(f);
}

void add_range(Ranges& r, int64_t begin, int64_t end) {
  if (begin >= end) return;
  auto it = std::lower_bound(r.begin(), r.end(), std::make_pair(begin, end));
  it = r.insert(it, {begin, end});
  if (it != r.begin() && std::prev(it)->second >= it->first) {
    std::prev(it)->second = std::max(std::prev(it)->second, it->second);
    it = std::prev(r.erase(it));
  }
  while (std::next(it) != r.end() && std::next(it)->first <= it->second) {
    it->second = std::max(it->second, std::next(it)->second);
    r.erase(std::next(it));
  }
}

bool ranges_meet(const Ranges& a, const Ranges& b) {
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    if (a[i].first < b[j].second && b[j].first < a[i].second) return true;
    if (a[i].second <= b[j].second)
      ++i;
    else
      ++j;
  }
  return false;
}

}  // namespace tiledist::mega
