# What `cmake --install` puts under the prefix (docs/install.md):
#   include/cohort/<layer>/*.h   the public headers, plus the generated config.h
#   lib/libcohort_<layer>.a      every layer (shared with BUILD_SHARED_LIBS=ON)
#   lib/cmake/cohort/            cohortConfig.cmake, its version file and the
#                                exported targets cohort::<layer>, cohort::cohort
#   lib/pkgconfig/cohort.pc      the same for pkg-config
#   bin/cohort                   the CLI (tools/cohort/CMakeLists.txt)
# Two install components, which are also the two Debian packages
# (cmake/CohortPackaging.cmake): `runtime` (the CLI) and `dev` (the rest).
#
# cohort_install_layers() is called by the top-level CMakeLists.txt once every
# layer exists; the layers come from the global property COHORT_LAYERS that
# cohort_layer() fills, bottom to top.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(COHORT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/cohort CACHE STRING
    "Where cohortConfig.cmake is installed, relative to the prefix")

# Headers that exist for the project's own tests and are not installed: they
# include GoogleTest (kernel_path_testing.h, the test_util.h files,
# reference_values.h) or only serve tests of this tree (autograd_testing.h).
set(COHORT_TEST_ONLY_HEADERS "_testing\\.h$|test_util\\.h$|/reference_values\\.h$")
# A layer's private state shared by its .cc files (no public header includes it).
set(COHORT_PRIVATE_HEADERS "_impl\\.h$")

function(cohort_install_layers)
  get_property(layers GLOBAL PROPERTY COHORT_LAYERS)
  set(targets)
  foreach(layer ${layers})
    list(APPEND targets cohort_${layer})
    # A layer's CMakeLists.txt may add include folders of this machine (core
    # adds OpenBLAS's for cblas.h, which no public header includes): they are
    # for building cohort, not for its users.
    get_target_property(dirs cohort_${layer} INTERFACE_INCLUDE_DIRECTORIES)
    set(kept)
    foreach(dir ${dirs})
      if(IS_ABSOLUTE "${dir}")
        list(APPEND kept "$<BUILD_INTERFACE:${dir}>")
      else()
        list(APPEND kept "${dir}")
      endif()
    endforeach()
    set_target_properties(cohort_${layer} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${kept}")

    file(GLOB_RECURSE headers RELATIVE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/cohort/${layer}/*.h)
    list(FILTER headers EXCLUDE REGEX "${COHORT_TEST_ONLY_HEADERS}")
    list(FILTER headers EXCLUDE REGEX "${COHORT_PRIVATE_HEADERS}")
    if(NOT COHORT_HAVE_MPI)
      list(FILTER headers EXCLUDE REGEX "^cohort/distributed/mpi/")
    endif()
    foreach(header ${headers})
      get_filename_component(dir ${header} DIRECTORY)
      install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${dir}
              COMPONENT dev)
    endforeach()
  endforeach()
  install(FILES ${PROJECT_SOURCE_DIR}/cohort/cohort.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cohort
          COMPONENT dev)
  install(FILES ${PROJECT_BINARY_DIR}/include/cohort/base/config.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cohort/base COMPONENT dev)

  # cohort::cohort: every layer. (The target is not called `cohort`: that is
  # the CLI.)
  # The LibTorch adapter is not in it: linking cohort::cohort never pulls in
  # LibTorch (link cohort::libtorch for that).
  set(umbrella_targets ${targets})
  list(REMOVE_ITEM umbrella_targets cohort_libtorch)
  add_library(cohort_umbrella INTERFACE)
  target_link_libraries(cohort_umbrella INTERFACE ${umbrella_targets})
  set_target_properties(cohort_umbrella PROPERTIES EXPORT_NAME cohort)
  add_library(cohort::cohort ALIAS cohort_umbrella)

  install(TARGETS ${targets} cohort_umbrella EXPORT cohortTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT dev)
  install(EXPORT cohortTargets NAMESPACE cohort:: DESTINATION ${COHORT_INSTALL_CMAKEDIR}
          COMPONENT dev)

  # cohortConfig.cmake finds again what the exported targets link.
  set(COHORT_LAYERS ${layers})
  set(COHORT_BLA_VENDOR "${BLA_VENDOR}")
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/cohortConfig.cmake.in
                                ${PROJECT_BINARY_DIR}/cohortConfig.cmake
                                INSTALL_DESTINATION ${COHORT_INSTALL_CMAKEDIR})
  # While the major version is 0 a minor release may break the API (as in
  # semantic versioning): find_package(cohort 0.1) accepts 0.1.x only.
  if(PROJECT_VERSION_MAJOR EQUAL 0)
    set(compat SameMinorVersion)
  else()
    set(compat SameMajorVersion)
  endif()
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/cohortConfigVersion.cmake
                                   COMPATIBILITY ${compat})
  install(FILES ${PROJECT_BINARY_DIR}/cohortConfig.cmake
                ${PROJECT_BINARY_DIR}/cohortConfigVersion.cmake
          DESTINATION ${COHORT_INSTALL_CMAKEDIR} COMPONENT dev)

  # cohort.pc: the libraries top layer first (static archives are searched in
  # order), and what they link as pkg-config modules.
  set(libs)
  foreach(layer ${layers})
    if(NOT layer STREQUAL "libtorch")  # LibTorch has no .pc file: CMake only
      list(PREPEND libs "-lcohort_${layer}")
    endif()
  endforeach()
  if(COHORT_HAVE_ONEDNN)
    list(APPEND libs "-ldnnl")  # core's bf16 matmul path; libdnnl-dev ships no .pc file
  endif()
  set(COHORT_PC_CFLAGS "")
  if(COHORT_HAVE_CUDA)
    # The CUDA layer's registration member (install.cc) is pulled in by name,
    # and the toolkit (not a Debian package) brings its libraries and headers.
    list(PREPEND libs "-Wl,--undefined=cohort_cuda_install")
    list(APPEND libs "-L${CUDAToolkit_LIBRARY_DIR}" "-lcudart" "-lcudnn" "-ldl")
    foreach(dir ${CUDAToolkit_INCLUDE_DIRS})
      string(APPEND COHORT_PC_CFLAGS " -I${dir}")
    endforeach()
  endif()
  list(JOIN libs " " COHORT_PC_LIBS)
  set(COHORT_PC_REQUIRES "openblas fmt zlib nlohmann_json")
  if(COHORT_HAVE_MPI)
    string(APPEND COHORT_PC_REQUIRES " ompi-c")
  endif()
  # Paths relative to the .pc file, so that the installed tree can move (and
  # an extracted .deb works); absolute ones where a packager made them so.
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
    set(COHORT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
    set(COHORT_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
    set(COHORT_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
  else()
    file(RELATIVE_PATH up /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
    string(REGEX REPLACE "/$" "" up "${up}")
    set(COHORT_PC_PREFIX "\${pcfiledir}/${up}")
    set(COHORT_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
    set(COHORT_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/cohort.pc.in ${PROJECT_BINARY_DIR}/cohort.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/cohort.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
          COMPONENT dev)
endfunction()
