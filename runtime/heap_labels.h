// Names for ranges of a symmetric heap, for the messages of the failures that name an address
// in it (a wait that timed out, a symm_at outside the heap): the owner of an allocation says
// what it holds and what each of its elements is ("the low-latency dispatch's signal words:
// word 5 = local expert 1's rows from rank 1, half 0"), so that a wait that gives up names the
// peer that never arrived rather than a byte offset. Offsets are the heap's (the same on every
// rank); the host's heap and the GPU's are apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace tiledist::runtime {

enum class Heap { host, gpu };

struct HeapLabel {
  std::string name;          // what the range holds ("EpLowLatencyDispatch's signal words")
  size_t element_bytes = 1;  // its elements' size
  /// What element i is, or nothing: the name alone.
  std::function<std::string(int64_t)> describe;
};

/// Names [offset, offset + bytes) of `heap` until unlabel_heap(heap, offset) (a new label at
/// the same offset replaces the old). Thread-safe.
void label_heap(Heap heap, size_t offset, size_t bytes, HeapLabel label);
void unlabel_heap(Heap heap, size_t offset);
/// "NAME, element I: DESCRIBE" for an offset inside a labelled range, else "".
std::string heap_label(Heap heap, size_t offset);

}  // namespace tiledist::runtime
