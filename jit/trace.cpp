#include "jit/trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "llvm/Support/JSON.h"
#include "support/support.h"

namespace tiledist::trace {

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(str_cat("tiledist-trace: cannot read ", path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The trace's microseconds (to the nanosecond) as nanoseconds.
int64_t ns_of(double us) { return std::llround(us * 1000.0); }

std::vector<int64_t> ints_of(const llvm::json::Array* a) {
  std::vector<int64_t> out;
  if (a)
    for (const llvm::json::Value& v : *a)
      if (auto i = v.getAsInteger()) out.push_back(*i);
  return out;
}

}  // namespace

Trace read(const std::string& path) {
  const std::string text = slurp(path);
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed) throw Error(str_cat("tiledist-trace: ", path, " is not JSON: ", llvm::toString(parsed.takeError())));
  const llvm::json::Object* top = parsed->getAsObject();
  const llvm::json::Array* events = top ? top->getArray("traceEvents") : nullptr;
  if (!events) throw Error(str_cat("tiledist-trace: ", path, " has no traceEvents array (not a trace)"));
  Trace t;
  size_t index = 0;
  for (const llvm::json::Value& v : *events) {
    const llvm::json::Object* e = v.getAsObject();
    auto bad = [&](const char* what) { return Error(str_cat("tiledist-trace: ", path, ": event ", index, " ", what)); };
    if (!e) throw bad("is not an object");
    std::string raw;
    llvm::raw_string_ostream os(raw);
    os << v;
    t.raw_events.push_back(std::move(raw));
    const auto ph = e->getString("ph");
    const auto name = e->getString("name");
    const auto pid = e->getInteger("pid");
    const auto tid = e->getInteger("tid");
    if (!ph || !name || !pid) throw bad("lacks its ph, name or pid");
    const llvm::json::Object* args = e->getObject("args");
    if (*ph == "M") {
      if (*name == "thread_name" && tid && args)
        if (auto n = args->getString("name")) t.track_names[{static_cast<int>(*pid), *tid}] = n->str();
    } else if (*ph == "X") {
      const auto ts = e->getNumber("ts"), dur = e->getNumber("dur");
      if (!ts || !dur || !tid) throw bad("(a span) lacks its ts, dur or tid");
      Span s;
      s.rank = static_cast<int>(*pid), s.track = *tid, s.name = name->str();
      s.start_ns = ns_of(*ts), s.dur_ns = ns_of(*dur);
      if (args) {
        if (auto k = args->getString("kernel")) s.kernel = k->str();
        s.program = ints_of(args->getArray("program"));
        s.coords = ints_of(args->getArray("coords"));
      }
      t.spans.push_back(std::move(s));
    } else if (*ph == "i") {
      if (name->starts_with("launch ") && e->getString("s") == llvm::StringRef("p")) {
        Launch l;
        l.rank = static_cast<int>(*pid), l.kernel = name->substr(7).str();
        if (auto ts = e->getNumber("ts")) l.at_ns = ns_of(*ts);
        if (args) {
          l.records = args->getInteger("records").value_or(0);
          l.dropped = args->getInteger("dropped").value_or(0);
          l.clock_error_ns = args->getInteger("clock_error_ns").value_or(0);
          l.kernel_ns = args->getInteger("kernel_ns").value_or(-1);
        }
        t.launches.push_back(std::move(l));
      } else {
        ++t.instants;
      }
    }
    ++index;
  }
  return t;
}

void merge(const std::vector<std::string>& paths, const std::string& out) {
  std::string text = "{\"traceEvents\":[\n";
  bool first = true;
  for (const std::string& p : paths)
    for (const std::string& e : read(p).raw_events) {
      text += first ? "" : ",\n";
      text += e;
      first = false;
    }
  text += "\n]}\n";
  std::ofstream f(out, std::ios::binary);
  f << text;
  f.close();
  if (!f) throw Error(str_cat("tiledist-trace: cannot write ", out));
}

Trace last_launch_of(const Trace& t, const std::string& kernel) {
  std::map<int, const Launch*> last;  // by rank
  for (const Launch& l : t.launches)
    if (l.kernel == kernel && (!last.count(l.rank) || last[l.rank]->at_ns <= l.at_ns)) last[l.rank] = &l;
  if (last.empty()) throw Error(str_cat("tiledist-trace: no launch of kernel '", kernel, "' in the traces"));
  Trace out;
  out.track_names = t.track_names;
  for (auto& [rank, l] : last) out.launches.push_back(*l);
  for (const Span& s : t.spans) {
    auto it = last.find(s.rank);
    if (s.kernel == kernel && it != last.end() && s.start_ns >= it->second->at_ns - it->second->clock_error_ns)
      out.spans.push_back(s);
  }
  return out;
}

int64_t RegionStats::skew_ns() const {
  if (ranks.empty()) return 0;
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const auto& [r, p] : ranks) lo = std::min(lo, p.first_start_ns), hi = std::max(hi, p.first_start_ns);
  return hi - lo;
}

std::vector<RegionStats> summarize(const Trace& t) {
  std::map<std::string, std::vector<const Span*>> by_name;
  for (const Span& s : t.spans) by_name[s.name].push_back(&s);
  std::vector<RegionStats> out;
  for (auto& [name, spans] : by_name) {
    RegionStats r;
    r.name = name;
    r.count = static_cast<int64_t>(spans.size());
    std::vector<int64_t> d;
    for (const Span* s : spans) {
      d.push_back(s->dur_ns);
      r.total_ns += s->dur_ns;
      auto [it, fresh] = r.ranks.try_emplace(s->rank);
      RegionStats::PerRank& p = it->second;
      p.count += 1, p.total_ns += s->dur_ns;
      p.first_start_ns = fresh ? s->start_ns : std::min(p.first_start_ns, s->start_ns);
    }
    std::sort(d.begin(), d.end());
    // (nearest rank: the smallest duration at or above the fraction of the spans)
    auto pct = [&](double q) {
      size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(d.size())));
      return d[std::min(d.size() - 1, i == 0 ? 0 : i - 1)];
    };
    r.mean_ns = r.total_ns / r.count;
    r.p50_ns = pct(0.50), r.p99_ns = pct(0.99), r.max_ns = d.back();
    out.push_back(std::move(r));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const RegionStats& a, const RegionStats& b) { return a.total_ns > b.total_ns; });
  return out;
}

std::string summary_text(const Trace& t) {
  auto us = [](int64_t ns) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", static_cast<double>(ns) / 1000.0);
    return std::string(b);
  };
  std::string s;
  int64_t dropped = 0;
  for (const Launch& l : t.launches) dropped += l.dropped;
  s += str_cat(t.launches.size(), " launches, ", t.spans.size(), " spans, ", t.instants, " instants",
               dropped ? str_cat(", ", dropped, " records dropped (raise TILEDIST_PROFILE_RECORDS)") : "", "\n");
  char line[512];
  std::snprintf(line, sizeof line, "%-28s %9s %14s %12s %12s %12s %12s\n", "region", "count", "total us", "mean us",
                "p50 us", "p99 us", "max us");
  s += line;
  const std::vector<RegionStats> stats = summarize(t);
  for (const RegionStats& r : stats) {
    std::snprintf(line, sizeof line, "%-28s %9lld %14s %12s %12s %12s %12s\n", r.name.c_str(),
                  static_cast<long long>(r.count), us(r.total_ns).c_str(), us(r.mean_ns).c_str(), us(r.p50_ns).c_str(),
                  us(r.p99_ns).c_str(), us(r.max_ns).c_str());
    s += line;
  }
  bool several = false;
  for (const RegionStats& r : stats) several |= r.ranks.size() > 1;
  if (!several) return s;
  s += "\nper rank: count, total us, first entry (us after the earliest rank's)\n";
  for (const RegionStats& r : stats) {
    if (r.ranks.size() < 2) continue;
    int64_t earliest = INT64_MAX;
    for (const auto& [rank, p] : r.ranks) earliest = std::min(earliest, p.first_start_ns);
    s += str_cat(r.name, " (skew ", us(r.skew_ns()), " us):");
    for (const auto& [rank, p] : r.ranks)
      s += str_cat("  rank ", rank, ": ", p.count, ", ", us(p.total_ns), ", +", us(p.first_start_ns - earliest));
    s += "\n";
  }
  return s;
}

}  // namespace tiledist::trace
