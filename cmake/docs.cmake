# The API reference (issue 30): `make docs` (the target `docs`) runs Doxygen over the headers a
# user includes or whose names a user writes, into build/docs/html, and fails on any warning: a
# member of the API left undocumented, a broken reference. The other installed headers (the IR,
# the runtime's ABI and world interfaces, support/) are there because these include them; they
# and the namespaces `dsl` (the tracing behind tl::) and `detail` are left out of the reference.
# ctest's docs.reference runs the same Doxyfile.
find_package(Doxygen)
if(NOT DOXYGEN_FOUND)
  add_custom_target(docs COMMAND ${CMAKE_COMMAND} -E echo "make docs: no doxygen (apt-get install doxygen)"
                    COMMAND ${CMAKE_COMMAND} -E false)
  return()
endif()
set(TD_API_HEADERS
    tiledist.h
    dsl/dist.h dsl/dtypes.h dsl/kernel_def.h dsl/profile.h dsl/tl.h
    jit/context.h jit/kernel.h jit/target.h
    kernels/attention.h kernels/ep.h kernels/flash_decode.h kernels/grouped_gemm.h kernels/kernels.h
    kernels/moe.h kernels/sp_attention.h kernels/transformer.h
    model/config.h model/decode_layer.h model/prefill_layer.h model/model.h model/layer_weights.h model/safetensors.h
    mega/task_graph.h mega/kernel_access.h mega/footprint.h mega/mega_kernel.h
    runtime/cuda.h runtime/graph.h runtime/hip.h runtime/stream.h runtime/world.h)
set(DOXYGEN_PROJECT_NAME tiledist)
set(DOXYGEN_PROJECT_NUMBER ${PROJECT_VERSION})
set(DOXYGEN_PROJECT_BRIEF "tile kernels that overlap computation with communication across GPUs")
set(DOXYGEN_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/docs)
set(DOXYGEN_STRIP_FROM_PATH ${PROJECT_SOURCE_DIR})
set(DOXYGEN_STRIP_FROM_INC_PATH ${PROJECT_SOURCE_DIR})
set(DOXYGEN_JAVADOC_AUTOBRIEF YES)
set(DOXYGEN_EXCLUDE_SYMBOLS "tiledist::dsl" "tiledist::dsl::*" "*::detail" "*::detail::*")
set(DOXYGEN_WARN_IF_UNDOCUMENTED YES)
set(DOXYGEN_WARN_NO_PARAMDOC NO)
set(DOXYGEN_WARN_AS_ERROR FAIL_ON_WARNINGS)
set(DOXYGEN_QUIET YES)
set(DOXYGEN_HAVE_DOT NO)
set(DOXYGEN_GENERATE_LATEX NO)
set(DOXYGEN_SORT_MEMBER_DOCS NO)
# (one comment over a group of overloads, `///@{ ... ///@}`, documents each of them)
set(DOXYGEN_DISTRIBUTE_GROUP_DOC YES)
list(TRANSFORM TD_API_HEADERS PREPEND ${PROJECT_SOURCE_DIR}/ OUTPUT_VARIABLE td_api_paths)
# (docs/api.dox: the main page and the namespaces; a namespace documented there makes Doxygen
# check that each of its free functions is documented too)
list(APPEND td_api_paths ${PROJECT_SOURCE_DIR}/docs/api.dox)
doxygen_add_docs(docs ${td_api_paths} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                 COMMENT "The API reference, into ${PROJECT_BINARY_DIR}/docs/html")
