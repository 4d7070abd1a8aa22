// A graph of a stream's work (runtime/graph.h), through the runtime's stream capture.
#include "runtime/graph.h"

#include "support/support.h"

namespace tiledist::runtime {

Graph::Graph(const Stream& stream, const std::function<void()>& queue) : api_(&stream.api()) {
  if (!stream.handle())
    throw Error("tiledist: a graph captured on the default stream (capture needs a stream of its own)");
  api_->capture_begin(stream.handle());
  try {
    queue();
  } catch (...) {
    try {  // (the capture ended, what it recorded discarded; the first error is the one to see)
      api_->graph_destroy(api_->capture_end(stream.handle()));
    } catch (const Error&) {
    }
    throw;
  }
  graph_ = api_->capture_end(stream.handle());
}

Graph::~Graph() {
  if (graph_) api_->graph_destroy(graph_);
}

void Graph::launch(const Stream& stream) const {
  if (&stream.api() != api_)
    throw Error(str_cat("tiledist: a graph of ", api_->name(), " launched on a ", stream.api().name(), " stream"));
  api_->graph_launch(graph_, stream.handle());
}

}  // namespace tiledist::runtime
