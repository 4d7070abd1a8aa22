// NVSHMEM's host library, found and loaded at run time (runtime/nvshmem.h).
#include "runtime/nvshmem.h"

#include <dlfcn.h>
#include <glob.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <type_traits>

#include "support/support.h"

namespace tiledist::nvshmem {
namespace {

constexpr const char* kHostLib = "libnvshmem_host.so.3";
constexpr const char* kDeviceLib = "libnvshmem_device.bc";
std::atomic<bool> started{false};  // (mark_initialized)

bool is_file(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool is_dir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}
/// The folders that match a shell pattern, sorted (as glob sorts them).
std::vector<std::string> folders(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g;
  if (glob(pattern.c_str(), GLOB_ONLYDIR, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
  globfree(&g);
  return out;
}
/// The place's folder: a file names the folder it is in.
std::string folder_of(const std::string& place) {
  if (is_file(place)) return place.substr(0, place.rfind('/'));
  return place;
}
/// Where a search looked, for an error: "A, B and C".
std::string listed(const std::vector<std::string>& places) {
  std::string s;
  for (size_t i = 0; i < places.size(); ++i) s += (i == 0 ? "" : i + 1 == places.size() ? " and " : ", ") + places[i];
  return s.empty() ? "nowhere" : s;
}

}  // namespace

Library load_library() {
  Library lib{};
  void* handle = nullptr;
  std::vector<std::string> looked;
  for (const std::string& place : search_paths()) {
    const std::string file = is_file(place) ? place : place + "/" + kHostLib;
    looked.push_back(place);
    if (!is_file(file)) continue;
    handle = dlopen(file.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!handle) throw Error(str_cat("tiledist: NVSHMEM's ", file, " was found but does not load (", dlerror(), ")"));
    lib.path = file;
    break;
  }
  if (!handle) {  // the loader's own search ($LD_LIBRARY_PATH, ld.so.cache)
    handle = dlopen(kHostLib, RTLD_NOW | RTLD_GLOBAL);
    if (!handle)
      throw Error(str_cat("tiledist: NVSHMEM not found: no ", kHostLib, " in ", listed(looked),
                          ", nor where the dynamic loader looks (set $TILEDIST_NVSHMEM to NVSHMEM's folder)"));
    lib.path = kHostLib;
  }
  auto bind = [&](auto& fn, const char* name) {
    void* p = dlsym(handle, name);
    if (!p) throw Error(str_cat("tiledist: NVSHMEM's ", lib.path, " lacks ", name, " (NVSHMEM 3 is needed)"));
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  bind(lib.hostlib_init_attr, "nvshmemx_hostlib_init_attr");
  bind(lib.hostlib_finalize, "nvshmemx_hostlib_finalize");
  bind(lib.get_uniqueid, "nvshmemx_get_uniqueid");
  bind(lib.set_attr_uniqueid_args, "nvshmemx_set_attr_uniqueid_args");
  bind(lib.my_pe, "nvshmem_my_pe");
  bind(lib.n_pes, "nvshmem_n_pes");
  bind(lib.malloc, "nvshmem_malloc");
  bind(lib.align, "nvshmem_align");
  bind(lib.free, "nvshmem_free");
  bind(lib.ptr, "nvshmem_ptr");
  bind(lib.barrier_all, "nvshmem_barrier_all");
  bind(lib.quiet, "nvshmem_quiet");
  bind(lib.cumodule_init, "nvshmemx_cumodule_init");
  bind(lib.cumodule_finalize, "nvshmemx_cumodule_finalize");
  return lib;
}

bool initialized() { return started.load(); }
void mark_initialized() { started.store(true); }

WorldKind world_kind() {
  const std::string w = env("TILEDIST_WORLD");
  if (w.empty() || w == "cuda") return WorldKind::cuda;
  if (w == "nvshmem") return WorldKind::nvshmem;
  throw Error(str_cat("tiledist: $TILEDIST_WORLD = '", w, "' is not a GPU world (cuda or nvshmem)"));
}

std::vector<std::string> search_paths() {
  std::vector<std::string> places;
  if (std::string t = env("TILEDIST_NVSHMEM"); !t.empty()) {
    places.push_back(t);
    if (is_dir(t + "/lib")) places.push_back(t + "/lib");
  }
  if (std::string h = env("NVSHMEM_HOME"); !h.empty()) places.push_back(h + "/lib");
  std::vector<std::string> envs;
  if (std::string v = env("VIRTUAL_ENV"); !v.empty()) envs.push_back(v + "/lib/python3*/site-packages");
  envs.push_back("/opt/torch/.venv/lib/python3*/site-packages");
  envs.push_back("/usr/local/lib/python3*/dist-packages");
  envs.push_back("/usr/lib/python3/dist-packages");
  for (const std::string& e : envs)
    for (const std::string& f : folders(e + "/nvidia/nvshmem/lib")) places.push_back(f);
  for (const std::string& f : folders("/usr/lib/x86_64-linux-gnu/nvshmem/*")) places.push_back(f);
  places.push_back("/usr/local/nvshmem/lib");
  places.push_back("/opt/nvidia/nvshmem/lib");
  return places;
}

const Library& library() {
  static Library lib;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      lib = load_library();
    } catch (const Error& e) {
      error = e.what();
    }
  });
  if (!error.empty()) throw Error(error);
  return lib;
}

std::string device_bitcode() {
  if (std::string p = env("NVSHMEM_LIBDEVICE_PATH"); !p.empty()) {
    if (!is_file(p)) throw Error(str_cat("tiledist: $NVSHMEM_LIBDEVICE_PATH = '", p, "' is not a file"));
    return p;
  }
  std::vector<std::string> looked;
  for (const std::string& place : search_paths()) {
    const std::string dir = folder_of(place);
    looked.push_back(dir);
    if (is_file(dir + "/" + kDeviceLib)) return dir + "/" + kDeviceLib;
  }
  throw Error(str_cat("tiledist: NVSHMEM's device library not found: no ", kDeviceLib, " in ", listed(looked),
                      " (set $NVSHMEM_LIBDEVICE_PATH to it, or $TILEDIST_NVSHMEM to NVSHMEM's folder)"));
}

}  // namespace tiledist::nvshmem
