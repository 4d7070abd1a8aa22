// The GPU world's heaps from NVSHMEM ($TILEDIST_WORLD=nvshmem, issue 31): rank 0 makes a unique
// id, which reaches every rank through the host world's heap (so tiledist-run and mpirun both
// start such a job, without NVSHMEM's launcher); each rank initializes NVSHMEM with it as its PE
// of the same number, takes its heap from NVSHMEM's symmetric heap (collectively, the same size
// everywhere) and finds each peer's as mapped here by nvshmem_ptr. Peers whose heaps this
// process cannot reach by loads and stores (on other hosts) are refused for now: the kernels'
// distributed ops still address peers' heaps directly.
#include <cstdlib>

#include "runtime/cuda_world.h"
#include "runtime/nvshmem.h"
#include "support/support.h"

namespace tiledist::cuda {

namespace {

void check(int status, const char* call, int rank) {
  if (status != 0) throw Error(str_cat("tiledist: rank ", rank, ": NVSHMEM's ", call, " failed (status ", status, ")"));
}

}  // namespace

void World::bootstrap_nvshmem() {
  runtime::World& host = runtime::World::get();
  const nvshmem::Library& lib = nvshmem::library();  // (first: its absence is the error to see)
  device();                                          // (the context current: NVSHMEM takes it)
  constexpr size_t kAlignment = size_t(2) << 20;
  start_bootstrap(host, kAlignment);
  // NVSHMEM's symmetric heap holds ours and what NVSHMEM allocates for itself, unless the user
  // sized it.
  if (!std::getenv("NVSHMEM_SYMMETRIC_SIZE"))
    setenv("NVSHMEM_SYMMETRIC_SIZE", std::to_string(heap_size_ + (size_t(256) << 20)).c_str(), 1);

  nvshmem::UniqueId id{};
  if (rank_ == 0) check(lib.get_uniqueid(&id), "nvshmemx_get_uniqueid", rank_);
  host.broadcast(&id, sizeof id, "NVSHMEM's unique id from rank 0");
  nvshmem::InitAttr attr;
  check(lib.set_attr_uniqueid_args(rank_, size_, &id, &attr), "nvshmemx_set_attr_uniqueid_args", rank_);
  check(lib.hostlib_init_attr(nvshmem::kInitWithUniqueId, &attr), "nvshmemx_hostlib_init_attr", rank_);
  nvshmem::mark_initialized();
  if (lib.my_pe() != rank_ || lib.n_pes() != size_)
    throw Error(
        str_cat("tiledist: rank ", rank_, " of ", size_, " became NVSHMEM's PE ", lib.my_pe(), " of ", lib.n_pes()));

  char* heap = static_cast<char*>(lib.align(kAlignment, heap_size_));  // (collective)
  if (!heap)
    throw Error(str_cat("tiledist: rank ", rank_, ": NVSHMEM could not allocate the GPU heap of ", heap_size_,
                        " bytes ($TILEDIST_GPU_HEAP_SIZE; $NVSHMEM_SYMMETRIC_SIZE sizes NVSHMEM's heap)"));
  for (int r = 0; r < size_; ++r) {
    bases_[r] = static_cast<char*>(lib.ptr(heap, r));
    if (!bases_[r])
      throw Error(str_cat("tiledist: rank ", rank_, " cannot reach the GPU heap of rank ", r,
                          " by loads and stores (nvshmem_ptr: a peer on another host, or no peer access): the "
                          "NVSHMEM world runs on the GPUs of one host so far"));
  }
  finish_bootstrap(host, {cuda::malloc, cuda::copy_to_device, cuda::memset, cuda::synchronize, host_mapped_alloc,
                          device().pci_location});
}

}  // namespace tiledist::cuda
