#include "runtime/hip_world.h"

#include <memory>

#include "support/support.h"

namespace tiledist::hip {

World& World::get() {
  return once<World>([] {
    std::unique_ptr<World> w(new World());  // lives until exit, as the host World does
    w->bootstrap();
    return w.release();
  });
}

void World::bootstrap() {
  runtime::World& host = runtime::World::get();
  if (host.hosts() > 1)
    throw Error(str_cat("tiledist: rank ", host.rank(), ": the job's ranks are on ", host.hosts(),
                        " hosts, and the HIP world opens its peers' GPU memory by IPC handles of one host"));
  device();
  start_bootstrap(host, size_t(2) << 20);  // (whole 2 MiB pages)
  bases_[rank_] = static_cast<char*>(hip::malloc_fine_grained(heap_size_));
  // Each rank's IPC handle goes through the host world's heap; every rank opens the others'.
  auto* handle = static_cast<IpcHandle*>(host.alloc(sizeof(IpcHandle)));
  *handle = ipc_export(bases_[rank_]);
  host.barrier();
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    try {
      bases_[r] = static_cast<char*>(ipc_import(*static_cast<const IpcHandle*>(host.at(handle, r))));
    } catch (const Error& e) {
      throw Error(str_cat(e.what(), " (rank ", rank_, " opening the GPU heap of rank ", r,
                          ": can this GPU reach that one? every pair needs peer access)"));
    }
  }
  host.barrier();  // every rank has read every handle
  host.free(handle);
  // (The ordinal names the GPU only where every rank sees the same devices; the library's
  // communicating objects, the only users of shares_gpu, do not run on AMD GPUs yet.)
  finish_bootstrap(host, {hip::malloc, hip::copy_to_device, hip::memset, hip::synchronize, hip::host_mapped_alloc,
                          uint64_t(hip::device().ordinal)});
}

}  // namespace tiledist::hip
