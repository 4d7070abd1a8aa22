/// @file
/// A graph of a stream's work (CUDA graphs, HIP graphs): the kernels, copies and waits that a
/// piece of host code queues on a stream, recorded once and then launched again and again as
/// one unit, so the host's cost of launching each of them is paid once. What a model's decode
/// step runs (model/model.h), as PyTorch's torch.cuda.CUDAGraph and vLLM's decode graphs.
///
///   runtime::Stream s;
///   runtime::Graph step(s, [&] { layer.run(x, y, &s); });  // recorded, not run
///   for (int i = 0; i < steps; ++i) step.launch(s);        // run (the library's runs: kernels::launch_graph)
///
/// What a graph holds is fixed at capture: the kernels' arguments (pointers, sizes), so the
/// captured code must read whatever changes between launches from memory it points to. The
/// library's runs say whether they may be captured (kernels.h: the objects whose protocols
/// keep their state in device memory); the others throw Error when run on a capturing stream.
#pragma once

#include <functional>

#include "runtime/stream.h"

namespace tiledist::runtime {

/// Recorded work of a stream, launched as one (the file's comment says how it is used).
class Graph {
 public:
  /// Records the work `queue` puts on `stream` (a stream of its own, not the default stream),
  /// without running it. Throws Error where the runtime cannot capture (the driver lacks
  /// graphs, the default stream given, an operation not allowed in a capture), and rethrows
  /// what `queue` throws, the capture ended and discarded first.
  Graph(const Stream& stream, const std::function<void()>& queue);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  /// Queues the recorded work on `stream` (any stream of the same runtime, the default
  /// stream included), after what it holds already.
  void launch(const Stream& stream) const;

 private:
  const GpuApi* api_;
  void* graph_ = nullptr;
};

}  // namespace tiledist::runtime
