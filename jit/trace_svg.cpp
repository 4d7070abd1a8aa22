// The timeline picture of a trace (trace::svg): a row per (rank, track), time left to right,
// each span a rect coloured by its region, nested spans inset over their parents, a legend.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "jit/trace.h"
#include "support/support.h"

namespace tiledist::trace {

namespace {

constexpr int kWidth = 1600;
constexpr int kLabelWidth = 260;  // the row labels, left of the plot
constexpr int kRightMargin = 20;
constexpr int kTop = 40;  // the time axis's labels are above the rows
constexpr int kRowHeight = 20;
constexpr int kRowGap = 2;
constexpr int kInset = 3;  // each level of nesting is this much thinner at top and bottom
constexpr size_t kMaxRows = 400;
constexpr const char* kWaitColour = "#d62728";
// Region colours, red left out: red says a wait.
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                    "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94"};
constexpr const char* kMiddleDot = "\xc2\xb7";
constexpr const char* kMicro = "\xc2\xb5";

std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// A time in ns, us or ms, whichever reads best at the size of `scale` (the time itself, or the
// axis's step, so that every tick has the same unit).
std::string duration(double ns, double scale) {
  if (scale < 1e3) return str_cat(number(ns), " ns");
  if (scale < 1e6) return str_cat(number(ns / 1e3), " ", kMicro, "s");
  return str_cat(number(ns / 1e6), " ms");
}
std::string duration(double ns) { return duration(ns, std::fabs(ns)); }

std::string tuple(const std::vector<int64_t>& v) {
  std::string out = "(";
  for (size_t i = 0; i < v.size(); ++i) out += str_cat(i ? ", " : "", v[i]);
  return out + ")";
}

// A round step (1, 2 or 5 times a power of ten) that cuts `range` into about `parts`.
double tick_step(double range, int parts) {
  double raw = range / parts;
  double ten = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * ten >= raw) return m * ten;
  return 10 * ten;
}

}  // namespace

std::string svg(const Trace& t) {
  if (t.spans.empty())
    return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"200\" height=\"40\">"
           "<text x=\"10\" y=\"25\" font-family=\"sans-serif\" font-size=\"14\">no spans</text></svg>\n";

  // Rows, by rank then track; spans of rows past the limit are left out.
  std::map<std::pair<int, int64_t>, std::vector<const Span*>> all_rows;
  for (const Span& s : t.spans) all_rows[{s.rank, s.track}].push_back(&s);
  std::vector<std::pair<std::pair<int, int64_t>, std::vector<const Span*>>> rows;
  for (auto& row : all_rows) {
    if (rows.size() == kMaxRows) break;
    rows.emplace_back(row.first, std::move(row.second));
  }
  const size_t left_out = all_rows.size() - rows.size();

  // Colours by region, in order of first appearance.
  std::vector<std::string> regions;
  std::map<std::string, std::string> colour;
  size_t next_colour = 0;
  for (const Span& s : t.spans) {
    if (colour.count(s.name)) continue;
    colour[s.name] =
        s.name.find("wait") != std::string::npos ? kWaitColour : kPalette[next_colour++ % std::size(kPalette)];
    regions.push_back(s.name);
  }

  int64_t t0 = t.spans[0].start_ns, t1 = t.spans[0].end_ns();
  for (const Span& s : t.spans) {
    t0 = std::min(t0, s.start_ns);
    t1 = std::max(t1, s.end_ns());
  }
  const double range = std::max<int64_t>(t1 - t0, 1);
  const double plot_width = kWidth - kLabelWidth - kRightMargin;
  auto x_of = [&](int64_t ns) { return kLabelWidth + (ns - t0) / range * plot_width; };

  const int rows_bottom = kTop + static_cast<int>(rows.size()) * (kRowHeight + kRowGap);
  const int note_height = left_out ? 20 : 0;
  const int legend_columns = (kWidth - 20) / 220;
  const int legend_rows = (static_cast<int>(regions.size()) + legend_columns - 1) / legend_columns;
  const int legend_top = rows_bottom + note_height + 20;
  const int height = legend_top + legend_rows * 18 + 10;

  std::string out = str_cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", kWidth, "\" height=\"", height,
                            "\" font-family=\"sans-serif\" font-size=\"11\">\n");
  out += str_cat("<rect x=\"0\" y=\"0\" width=\"", kWidth, "\" height=\"", height, "\" fill=\"white\"/>\n");

  // The time axis: ticks from the earliest start, with vertical lines through the rows.
  const double step = tick_step(range, 8);
  for (int i = 0; i * step <= range * (1 + 1e-9); ++i) {
    const double v = i * step, x = kLabelWidth + v / range * plot_width;
    out += str_cat("<line x1=\"", number(x), "\" y1=\"", kTop - 6, "\" x2=\"", number(x), "\" y2=\"", rows_bottom,
                   "\" stroke=\"#ddd\"/>\n");
    out += str_cat("<text x=\"", number(x), "\" y=\"", kTop - 10, "\" text-anchor=\"middle\">", duration(v, step),
                   "</text>\n");
  }

  // The rows: label, then spans sorted by start (the longer first at a tie, so parents come
  // before their children); a span's depth is how many earlier spans of its row contain it.
  for (size_t r = 0; r < rows.size(); ++r) {
    auto& [key, spans] = rows[r];
    const int y = kTop + static_cast<int>(r) * (kRowHeight + kRowGap);
    if (r > 0 && rows[r - 1].first.first != key.first)
      out += str_cat("<line x1=\"0\" y1=\"", y - 1, "\" x2=\"", kWidth, "\" y2=\"", y - 1, "\" stroke=\"#999\"/>\n");
    auto name = t.track_names.find(key);
    std::string track = name != t.track_names.end() ? name->second : str_cat("track ", key.second);
    out += str_cat("<text x=\"6\" y=\"", y + kRowHeight - 6, "\">rank ", key.first, " ", kMiddleDot, " ", escape(track),
                   "</text>\n");
    std::sort(spans.begin(), spans.end(), [](const Span* a, const Span* b) {
      return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->dur_ns > b->dur_ns;
    });
    std::vector<int64_t> open_ends;
    for (const Span* s : spans) {
      while (!open_ends.empty() && open_ends.back() <= s->start_ns) open_ends.pop_back();
      const int depth = static_cast<int>(open_ends.size());
      open_ends.push_back(s->end_ns());
      const int h = std::max(4, kRowHeight - 2 * kInset * depth);
      const double x = x_of(s->start_ns), w = std::max(0.5, s->dur_ns / range * plot_width);
      std::string title =
          str_cat(escape(s->name), "\nkernel: ", escape(s->kernel),
                  "\nduration: ", duration(static_cast<double>(s->dur_ns)), "\nprogram: ", tuple(s->program));
      if (!s->coords.empty()) title += str_cat("\ncoords: ", tuple(s->coords));
      out += str_cat("<rect class=\"span\" x=\"", number(x), "\" y=\"", y + (kRowHeight - h) / 2, "\" width=\"",
                     number(w), "\" height=\"", h, "\" fill=\"", colour[s->name],
                     "\" stroke=\"#333\" stroke-width=\"0.3\"><title>", title, "</title></rect>\n");
    }
  }
  if (left_out)
    out += str_cat("<text x=\"6\" y=\"", rows_bottom + 14, "\">", left_out, " more rows left out (the first ", kMaxRows,
                   " of ", all_rows.size(), " are drawn)</text>\n");

  // The legend: a swatch and a name per region.
  for (size_t i = 0; i < regions.size(); ++i) {
    const int x = 10 + static_cast<int>(i % legend_columns) * 220;
    const int y = legend_top + static_cast<int>(i / legend_columns) * 18;
    out += str_cat("<rect class=\"legend\" x=\"", x, "\" y=\"", y, "\" width=\"12\" height=\"12\" fill=\"",
                   colour[regions[i]], "\"/>\n");
    out += str_cat("<text x=\"", x + 18, "\" y=\"", y + 10, "\">", escape(regions[i]), "</text>\n");
  }
  return out + "</svg>\n";
}

}  // namespace tiledist::trace
