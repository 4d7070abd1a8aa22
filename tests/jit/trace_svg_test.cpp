// The timeline picture of a trace (trace::svg): rows per (rank, track), a rect per span, waits
// in red, nesting by containment, names escaped, the row limit.
#include <gtest/gtest.h>

#include <string>

#include "jit/trace.h"

namespace tiledist::trace {
namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

// The rect whose hover title begins with `title`.
std::string rect_titled(const std::string& svg, const std::string& title) {
  size_t at = svg.find("<title>" + title);
  if (at == std::string::npos) return "";
  size_t begin = svg.rfind("<rect", at);
  return svg.substr(begin, at - begin);
}

Span span(int rank, int64_t track, const std::string& name, int64_t start, int64_t dur) {
  Span s;
  s.rank = rank;
  s.track = track;
  s.name = name;
  s.kernel = "k";
  s.start_ns = start;
  s.dur_ns = dur;
  s.program = {rank, 0, 0};
  return s;
}

// Two ranks, three tracks; on rank 0's first track, a step holding a load holding an escaped
// name, then a wait; rank 1 waits inside its step.
Trace two_ranks() {
  Trace t;
  t.spans = {span(0, 0, "step", 0, 1000),  span(0, 0, "load", 100, 300), span(0, 0, "a<b&c", 150, 100),
             span(0, 0, "wait", 500, 400), span(0, 1, "step", 50, 900),  span(1, 0, "step", 20, 1000),
             span(1, 0, "wait", 300, 400)};
  t.track_names[{0, 0}] = "SM 0";
  t.track_names[{0, 1}] = "SM 1";
  return t;
}

TEST(TraceSvg, ARowPerRankAndTrack) {
  const std::string svg = trace::svg(two_ranks());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  size_t r0 = svg.find(">rank 0 \xc2\xb7 SM 0<"), r1 = svg.find(">rank 0 \xc2\xb7 SM 1<");
  size_t r2 = svg.find(">rank 1 \xc2\xb7 track 0<");
  ASSERT_NE(r0, std::string::npos);
  ASSERT_NE(r1, std::string::npos);
  ASSERT_NE(r2, std::string::npos);
  EXPECT_LT(r0, r1);
  EXPECT_LT(r1, r2);
  EXPECT_EQ(count(svg, ">rank "), 3u);
}

// The rects: the background, a swatch per region (step, load, a<b&c, wait), a rect per span.
TEST(TraceSvg, ARectPerSpan) {
  const Trace t = two_ranks();
  const std::string svg = trace::svg(t);
  EXPECT_EQ(count(svg, "<rect"), 1 + 4 + t.spans.size());
  EXPECT_EQ(count(svg, "<rect class=\"span\""), t.spans.size());
  EXPECT_EQ(count(svg, "<rect class=\"legend\""), 4u);
  EXPECT_EQ(count(svg, "<title>"), t.spans.size());
}

TEST(TraceSvg, WaitsAreRed) {
  const std::string svg = trace::svg(two_ranks());
  EXPECT_NE(rect_titled(svg, "wait\n").find("fill=\"#d62728\""), std::string::npos) << svg;
  EXPECT_EQ(count(svg, "fill=\"#d62728\""), 3u);  // two spans and the legend's swatch
  EXPECT_EQ(rect_titled(svg, "step\n").find("fill=\"#d62728\""), std::string::npos);
}

// Depth by containment: each level is 6 px thinner than its parent's.
TEST(TraceSvg, NestedSpansAreThinner) {
  const std::string svg = trace::svg(two_ranks());
  EXPECT_NE(rect_titled(svg, "step\n").find("height=\"20\""), std::string::npos);
  EXPECT_NE(rect_titled(svg, "load\n").find("height=\"14\""), std::string::npos);
  EXPECT_NE(rect_titled(svg, "a&lt;b&amp;c\n").find("height=\"8\""), std::string::npos);
  EXPECT_NE(rect_titled(svg, "wait\n").find("height=\"14\""), std::string::npos);
}

TEST(TraceSvg, NamesAreEscaped) {
  Trace t = two_ranks();
  t.track_names[{1, 0}] = "\"x\" & 'y'";
  const std::string svg = trace::svg(t);
  EXPECT_EQ(svg.find("a<b"), std::string::npos);
  EXPECT_EQ(count(svg, "a&lt;b&amp;c"), 2u);  // the span's title and the legend
  EXPECT_NE(svg.find("rank 1 \xc2\xb7 &quot;x&quot; &amp; &apos;y&apos;"), std::string::npos);
}

TEST(TraceSvg, EmptyTrace) {
  const std::string svg = trace::svg(Trace{});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("no spans"), std::string::npos);
  EXPECT_EQ(count(svg, "<rect"), 0u);
}

TEST(TraceSvg, RowsPastTheLimitAreLeftOut) {
  Trace t;
  for (int track = 0; track < 405; ++track) t.spans.push_back(span(0, track, "step", track, 10));
  const std::string svg = trace::svg(t);
  EXPECT_EQ(count(svg, ">rank 0 "), 400u);
  EXPECT_EQ(count(svg, "<rect class=\"span\""), 400u);
  EXPECT_NE(svg.find("5 more rows left out (the first 400 of 405 are drawn)"), std::string::npos);
}

}  // namespace
}  // namespace tiledist::trace
