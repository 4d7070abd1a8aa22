// The names of symmetric heap ranges (heap_labels.h).
#include "runtime/heap_labels.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "support/support.h"

namespace tiledist::runtime {
namespace {

struct Range {
  size_t bytes;
  HeapLabel label;
};
struct Labels {
  std::mutex mutex;
  std::map<size_t, Range> ranges[2];  // by heap, by offset
};
Labels& labels() {
  static Labels* l = new Labels();  // (never destroyed: failures may be described at exit)
  return *l;
}

}  // namespace

void label_heap(Heap heap, size_t offset, size_t bytes, HeapLabel label) {
  Labels& l = labels();
  std::lock_guard<std::mutex> lock(l.mutex);
  l.ranges[static_cast<int>(heap)][offset] = Range{bytes, std::move(label)};
}

void unlabel_heap(Heap heap, size_t offset) {
  Labels& l = labels();
  std::lock_guard<std::mutex> lock(l.mutex);
  l.ranges[static_cast<int>(heap)].erase(offset);
}

std::string heap_label(Heap heap, size_t offset) {
  Labels& l = labels();
  std::lock_guard<std::mutex> lock(l.mutex);
  const auto& ranges = l.ranges[static_cast<int>(heap)];
  auto it = ranges.upper_bound(offset);
  if (it == ranges.begin()) return "";
  --it;
  const size_t at = offset - it->first;
  if (at >= it->second.bytes) return "";
  const HeapLabel& label = it->second.label;
  const int64_t i = static_cast<int64_t>(at / std::max<size_t>(label.element_bytes, 1));
  std::string text = str_cat(label.name, ", element ", i);
  if (label.describe) text += str_cat(": ", label.describe(i));
  return text;
}

}  // namespace tiledist::runtime
