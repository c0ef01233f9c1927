# Cross-compiling cohort for 64-bit Arm Linux on a Debian amd64 host (see
# scripts/cross_aarch64.sh and docs/aarch64.md):
#   cmake -S . -B build-aarch64 -G Ninja \
#     -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake
# Needs Debian's cross compiler (g++-aarch64-linux-gnu), the arm64 multiarch dev
# packages (libopenblas-dev:arm64, ...) and qemu-user, which runs the test
# executables when gtest_discover_tests lists them and under ctest.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# The cross libc and libstdc++ live in /usr/aarch64-linux-gnu; everything else
# (OpenBLAS, fmt, GTest, zlib) is installed multiarch under /usr, in
# /usr/lib/aarch64-linux-gnu, which CMAKE_LIBRARY_ARCHITECTURE makes CMake
# search before /usr/lib. Architecture-independent packages (nlohmann_json,
# CLI11) sit in /usr/share and /usr/lib/cmake. Programs are the build
# machine's; libraries, headers and packages come from the target's roots.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# Runs target executables on the build machine: gtest_discover_tests lists
# each test binary's tests through it, and ctest runs the tests through it.
# The loader and every library come from the multiarch arm64 packages
# (libc6:arm64, libstdc++6:arm64, the -dev packages' libraries), as on a Debian
# arm64 machine. Not -L /usr/aarch64-linux-gnu: that makes the loader
# the cross toolchain's (libc6-arm64-cross) while libc.so.6 is still found
# first in /lib/aarch64-linux-gnu; ld.so and libc.so.6 must come from the same
# glibc build, and once they differ (after any libc6 update: the cross package
# lags) the first pthread_create (OpenBLAS's thread pool) never returns.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /)
