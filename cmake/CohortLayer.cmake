# cohort_layer(NAME <layer> DEPS <targets...> [LIBS <libs...>])
# Every *.cc under the layer's folder (recursively) that is not a *_test.cc
# goes into the library target cohort_<layer>; every *_test.cc goes into the
# test executable cohort_<layer>_tests, whose tests ctest discovers (labelled
# <layer>). Adding a file to a layer therefore needs no CMake edit.
# A *_isa.cc is a kernel source compiled once per ISA in COHORT_ISAS (with
# COHORT_ISA_<ISA> defined; see cohort/base/isa.h) into the same library, and
# not at all where COHORT_ISAS is empty (other architectures).
# Each layer is also cohort::<layer> (an alias here, the exported name once
# installed) and is recorded, bottom to top, in the global property
# COHORT_LAYERS, from which cmake/CohortInstall.cmake installs them.
include(GNUInstallDirs)
include(GoogleTest)

function(cohort_layer)
  cmake_parse_arguments(L "" "NAME" "DEPS;LIBS;TEST_LIBS" ${ARGN})
  file(GLOB_RECURSE all_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  set(lib_srcs ${all_srcs})
  list(FILTER lib_srcs EXCLUDE REGEX "_test\\.cc$")
  set(isa_srcs ${lib_srcs})
  list(FILTER isa_srcs INCLUDE REGEX "_isa\\.cc$")
  list(FILTER lib_srcs EXCLUDE REGEX "_isa\\.cc$")
  set(test_srcs ${all_srcs})
  list(FILTER test_srcs INCLUDE REGEX "_test\\.cc$")
  if(lib_srcs)
    add_library(cohort_${L_NAME} ${lib_srcs})
    set(vis PUBLIC)
  else()
    # A layer with headers only so far (e.g. while its API is being written).
    add_library(cohort_${L_NAME} INTERFACE)
    set(vis INTERFACE)
  endif()
  # The build sees the source tree and the generated config.h; an installed
  # cohort sees <prefix>/include, which holds both (cmake/CohortInstall.cmake).
  target_include_directories(cohort_${L_NAME} ${vis} $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                             $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  # FindBLAS names libraries by path (BLAS_LIBRARIES); link its imported target
  # instead, so that the exported targets name BLAS::BLAS, which an installed
  # cohort finds again on the consumer's machine, not a path on this one.
  set(libs)
  foreach(lib ${L_LIBS})
    if(BLAS_LIBRARIES AND lib IN_LIST BLAS_LIBRARIES AND TARGET BLAS::BLAS)
      list(APPEND libs BLAS::BLAS)
    else()
      list(APPEND libs ${lib})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES libs)
  target_link_libraries(cohort_${L_NAME} ${vis} ${L_DEPS} ${libs})
  # The headers are C++20: users of the layer (an installed one too) compile so.
  target_compile_features(cohort_${L_NAME} ${vis} cxx_std_20)
  # Installed and exported as cohort::<layer> (cmake/CohortInstall.cmake); the
  # alias lets code in this tree use the same name.
  set_target_properties(cohort_${L_NAME} PROPERTIES EXPORT_NAME ${L_NAME})
  add_library(cohort::${L_NAME} ALIAS cohort_${L_NAME})
  set_property(GLOBAL APPEND PROPERTY COHORT_LAYERS ${L_NAME})
  if(isa_srcs AND lib_srcs)
    foreach(isa ${COHORT_ISAS})
      string(TOUPPER ${isa} ISA)
      add_library(cohort_${L_NAME}_${isa} OBJECT ${isa_srcs})
      target_compile_definitions(cohort_${L_NAME}_${isa} PRIVATE COHORT_ISA_${ISA}=1)
      target_include_directories(cohort_${L_NAME}_${isa} PRIVATE ${PROJECT_SOURCE_DIR}
                                 ${PROJECT_BINARY_DIR}/include)
      target_link_libraries(cohort_${L_NAME}_${isa} PRIVATE ${L_DEPS} ${libs})
      target_sources(cohort_${L_NAME} PRIVATE $<TARGET_OBJECTS:cohort_${L_NAME}_${isa}>)
    endforeach()
  endif()
  if(test_srcs AND COHORT_BUILD_TESTS)
    add_executable(cohort_${L_NAME}_tests ${test_srcs})
    target_link_libraries(cohort_${L_NAME}_tests PRIVATE cohort_${L_NAME} ${L_TEST_LIBS}
                          GTest::gtest GTest::gtest_main GTest::gmock)
    # Labelled with the layer, so that `ctest -L` selects a layer's tests
    # (scripts/sanitize.sh tsan --layers).
    gtest_discover_tests(cohort_${L_NAME}_tests DISCOVERY_TIMEOUT 60
                         PROPERTIES TIMEOUT 300 LABELS ${L_NAME})
  endif()
endfunction()
