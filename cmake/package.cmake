# `cpack` (in the build tree) makes a Debian package of what cmake/install.cmake installs, under
# /usr: the library, the headers, the tools, the CMake and pkg-config files. Its Depends are the
# run-time libraries its binaries link, as dpkg-shlibdeps finds them (hwloc, zstd; libclang-cpp
# and libLLVM for tiledist-warmup's C++ front end). tests/install/deb.sh builds and unpacks it
# into a scratch root, then builds an example against that.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tiledist)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "compiler and runtime for GPU kernels that overlap computation with communication")
set(CPACK_PACKAGE_CONTACT "tiledist developers")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# (the libraries of the package itself: dpkg-shlibdeps finds them here rather than in a package)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR} ${PROJECT_BINARY_DIR}/tools)
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "pkgconf, cmake, g++")  # (to build against it)
include(CPack)
