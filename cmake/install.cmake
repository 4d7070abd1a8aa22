# What `cmake --install` puts under a prefix, for projects that use tiledist (issue 30): the
# shared library (versioned soname), the public headers (those tiledist.h and the kernel
# library's headers include, no LLVM, nothing of the implementation) under include/tiledist,
# the tools a job runs, a CMake package (find_package(tiledist 0.2) -> tiledist::tiledist) and a
# pkg-config file. tests/install/ installs into a scratch prefix and builds examples/ with it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TD_INCLUDE_SUBDIR ${CMAKE_INSTALL_INCLUDEDIR}/tiledist)
# The public headers: tiledist.h and the kernel library's, and every header of ours they include
# (tests/install/check.sh compiles each alone against the installed tree: one missing fails).
set(TD_PUBLIC_HEADERS
    tiledist.h
    dsl/dist.h dsl/dtypes.h dsl/kernel_def.h dsl/profile.h dsl/tl.h
    ir/builder.h ir/ir.h ir/numeric.h ir/ops.def ir/types.h
    jit/context.h jit/kernel.h jit/target.h
    kernels/attention.h kernels/ep.h kernels/flash_decode.h kernels/grouped_gemm.h kernels/kernels.h
    kernels/moe.h kernels/sp_attention.h kernels/transformer.h
    model/config.h model/decode_layer.h model/prefill_layer.h model/model.h model/layer_weights.h model/safetensors.h
    mega/task_graph.h mega/kernel_access.h mega/footprint.h mega/mega_kernel.h
    runtime/cuda.h runtime/cuda_world.h runtime/gpu_world.h runtime/hip.h runtime/host.h runtime/host_abi.h
    runtime/graph.h runtime/stream.h runtime/world.h
    support/device_world.h support/dtype.h support/support.h support/tma.h)
foreach(h ${TD_PUBLIC_HEADERS})
  get_filename_component(dir ${h} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${h} DESTINATION ${TD_INCLUDE_SUBDIR}/${dir} COMPONENT dev)
endforeach()

install(TARGETS tiledist EXPORT tiledistTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
# The tools a job runs, beside the library (found relative to themselves, as in the build tree).
set(TD_TOOLS tiledist-run tiledist-compile tiledist-cache tiledist-trace tiledist-warmup tiledist-model)
set_target_properties(${TD_TOOLS} PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS ${TD_TOOLS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
# tiledist-warmup's C++ front end (built where libclang-19-dev is), where it looks when installed:
# lib/tiledist/ beside the bin/ it runs from (it compiles users' sources against include/tiledist)
if(TD_HAVE_CC)
  install(TARGETS tiledist-cc LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/tiledist COMPONENT runtime)
endif()

set(TD_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tiledist)
install(EXPORT tiledistTargets NAMESPACE tiledist:: DESTINATION ${TD_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tiledistConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/tiledistConfig.cmake INSTALL_DESTINATION ${TD_CMAKE_DIR})
# 0.x: a release's minor version breaks what the one before it offered
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tiledistConfigVersion.cmake VERSION ${PROJECT_VERSION}
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tiledistConfig.cmake ${PROJECT_BINARY_DIR}/tiledistConfigVersion.cmake
        DESTINATION ${TD_CMAKE_DIR} COMPONENT dev)
# (the prefix relative to the .pc file, so that `cmake --install --prefix` anywhere holds)
file(RELATIVE_PATH TD_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(${PROJECT_SOURCE_DIR}/cmake/tiledist.pc.in ${PROJECT_BINARY_DIR}/tiledist.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tiledist.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
