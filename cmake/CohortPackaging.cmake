# Debian packages with `cpack -G DEB` (docs/install.md), one per install
# component (cmake/CohortInstall.cmake):
#   cohort      the CLI; Depends computed by dpkg-shlibdeps from the shared
#               libraries it links (libopenblas0, zlib1g, libfmt9, libopenmpi3...)
#   cohort-dev  headers, static libraries, the CMake package and cohort.pc;
#               Depends on cohort and on the -dev packages whose CMake or
#               pkg-config files cohortConfig.cmake and cohort.pc look for.
# Both install under /usr.
set(COHORT_PACKAGE_MAINTAINER "cohort maintainers <maintainers@users.noreply.a-seed-a5af0580.example>"
    CACHE STRING "Maintainer field of the Debian packages")

set(CPACK_PACKAGE_NAME cohort)
set(CPACK_PACKAGE_VENDOR cohort)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Distributed deep-learning training in C++")
set(CPACK_PACKAGE_CONTACT "${COHORT_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_COMPONENTS_ALL runtime dev)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # cohort_0.1.0_amd64.deb, cohort-dev_0.1.0_amd64.deb
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${COHORT_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)  # cohort-dev Depends: cohort (= version)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME cohort)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION science)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
# `cohort run` launches the workers itself; mpirun is needed only for
# programs that use the mpi backend.
if(COHORT_HAVE_MPI)
  set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS "openmpi-bin")
endif()

set(CPACK_DEBIAN_DEV_PACKAGE_NAME cohort-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(dev_depends "libopenblas-dev, zlib1g-dev, libfmt-dev, nlohmann-json3-dev")
if(COHORT_HAVE_MPI)
  string(APPEND dev_depends ", libopenmpi-dev")
endif()
if(COHORT_HAVE_ONEDNN)
  string(APPEND dev_depends ", libdnnl-dev")  # libcohort_core.a's bf16 path links libdnnl
endif()
if(COHORT_HAVE_LIBTORCH)
  # libcohort_libtorch.a, the optional adapter: programs that use it link LibTorch.
  set(CPACK_DEBIAN_DEV_PACKAGE_SUGGESTS "libtorch-dev, libgloo-dev")
endif()
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${dev_depends}")
set(CPACK_DEBIAN_DEV_PACKAGE_RECOMMENDS "g++ (>= 4:12), cmake (>= 3.25), pkg-config")

set(COHORT_RUNTIME_DESCRIPTION "The command-line tool: cohort run launches a job's worker processes
(like torchrun), cohort train trains the built-in models, cohort bench
measures, cohort info describes the machine and the build.")
if(COHORT_HAVE_TORCH_BACKEND)
  # cohort_torch, the torch.distributed backend, in Python's dist-packages: it
  # needs PyTorch itself, which the CLI does not.
  if(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS)
    string(APPEND CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS ", python3-torch")
  else()
    set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS "python3-torch")
  endif()
  string(APPEND COHORT_RUNTIME_DESCRIPTION "
Also the Python package cohort_torch: `import cohort_torch`, then
torch.distributed.init_process_group(\"cohort\") runs PyTorch programs on
cohort's collectives (needs python3-torch).")
endif()
if(COHORT_HAVE_CUDA)
  # cudart, cuBLASLt and cuDNN are NVIDIA's, outside Debian's archive: not
  # Depends, said here.
  string(APPEND COHORT_RUNTIME_DESCRIPTION "
Built with the CUDA layer: needs the CUDA 13 toolkit's cudart, cuBLASLt and
cuDNN 9 libraries (NVIDIA's packages) on the library path.")
endif()
include(CPack)
cpack_add_component(runtime DISPLAY_NAME "cohort CLI"
  DESCRIPTION "${COHORT_RUNTIME_DESCRIPTION}")
cpack_add_component(dev DISPLAY_NAME "cohort headers, libraries, CMake and pkg-config files"
  DESCRIPTION "Development files: headers, static libraries, the CMake package
(find_package(cohort) gives cohort::cohort and cohort::<layer>) and cohort.pc
for pkg-config."
  DEPENDS runtime)
