// NVSHMEM's host library, loaded at run time (issue 31): where tiledist looks for it, the entry
// points the NVSHMEM world calls, and the ABI of the structures they take (NVSHMEM 3's
// host/nvshmemx_api.h and its types header: sizes checked here, as NVSHMEM checks them). Which
// GPU world a process runs ($TILEDIST_WORLD) is chosen here too. Not a public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tiledist::nvshmem {

/// The GPU worlds: CUDA VMM heaps that the processes of one host map (the default), or
/// NVSHMEM's symmetric heap (across hosts).
enum class WorldKind { cuda, nvshmem };
/// $TILEDIST_WORLD: "cuda" (or unset) or "nvshmem"; anything else throws Error naming it.
WorldKind world_kind();

/// The unique id rank 0 makes and every rank passes to the initialization (128 bytes).
struct UniqueId {
  int version;
  char internal[124];
};
/// What nvshmemx_set_attr_uniqueid_args fills in.
struct UniqueIdArgs {
  int version;
  UniqueId* id;
  int myrank;
  int nranks;
};
/// nvshmemx_init_args_t (version 2).
struct InitArgs {
  int version;
  UniqueIdArgs uid_args;
  int cuda_device_id;
  char content[92];
};
/// nvshmemx_init_attr_t (version 2), as NVSHMEMX_INIT_ATTR_INITIALIZER sets it up.
struct InitAttr {
  int version = (2 << 16) + 144;
  void* mpi_comm = nullptr;
  InitArgs args{(2 << 16) + 128, {(1 << 16) + 24, nullptr, -1, -1}, -1, {}};
};
static_assert(sizeof(UniqueId) == 128 && sizeof(UniqueIdArgs) == 24 && sizeof(InitArgs) == 128 &&
                  sizeof(InitAttr) == 144,
              "NVSHMEM 3's ABI");
/// nvshmemx_hostlib_init_attr's flag: initialize with a unique id (NVSHMEMX_INIT_WITH_UNIQUEID).
inline constexpr unsigned kInitWithUniqueId = 1u << 3;

/// NVSHMEM's host library: the entry points the NVSHMEM world calls.
struct Library {
  std::string path;  ///< the libnvshmem_host.so.3 loaded
  int (*hostlib_init_attr)(unsigned flags, InitAttr* attr);
  void (*hostlib_finalize)();
  int (*get_uniqueid)(UniqueId* id);
  int (*set_attr_uniqueid_args)(int myrank, int nranks, const UniqueId* id, InitAttr* attr);
  int (*my_pe)();
  int (*n_pes)();
  void* (*malloc)(size_t bytes);
  void* (*align)(size_t alignment, size_t bytes);
  void (*free)(void* p);
  void* (*ptr)(const void* p, int pe);
  void (*barrier_all)();
  void (*quiet)();
  int (*cumodule_init)(void* module);
  int (*cumodule_finalize)(void* module);
};

/// Where tiledist looks for libnvshmem_host.so.3, in order: $TILEDIST_NVSHMEM (NVSHMEM's folder,
/// its lib/ folder or the library itself), $NVSHMEM_HOME/lib, the `nvidia/nvshmem/lib` folder of
/// Python environments ($VIRTUAL_ENV's, /opt/torch/.venv's, the system's), and the folders
/// Debian's and NVIDIA's packages use; then the dynamic loader's own search.
std::vector<std::string> search_paths();
/// Finds and loads the library; throws Error saying that NVSHMEM was not found and naming every
/// place looked in, or that the library found does not load, or which entry point it lacks.
Library load_library();
/// load_library(), once a process (its error, every time).
const Library& library();
/// Whether this process's GPU world was bootstrapped on NVSHMEM (cuda::World, $TILEDIST_WORLD=
/// nvshmem): until then NVSHMEM's calls on modules (cumodule_init) would crash, not fail.
bool initialized();
/// Recorded by the bootstrap once NVSHMEM is initialized.
void mark_initialized();
/// NVSHMEM's device library (libnvshmem_device.bc): $NVSHMEM_LIBDEVICE_PATH, else beside the
/// host library; throws Error naming where it looked.
std::string device_bitcode();

}  // namespace tiledist::nvshmem
