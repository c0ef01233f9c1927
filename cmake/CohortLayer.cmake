# cohort_layer(NAME <layer> DEPS <targets...> [LIBS <libs...>])
# Every *.cc under the layer's folder (recursively) that is not a *_test.cc
# goes into the library target cohort_<layer>; every *_test.cc goes into the
# test executable cohort_<layer>_tests, whose tests ctest discovers. Adding a
# file to a layer therefore needs no CMake edit.
# A *_isa.cc is a kernel source compiled once per ISA in COHORT_ISAS (with
# COHORT_ISA_<ISA> defined; see cohort/base/isa.h) into the same library, and
# not at all where COHORT_ISAS is empty (other architectures).
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
  target_include_directories(cohort_${L_NAME} ${vis} ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/include)
  target_link_libraries(cohort_${L_NAME} ${vis} ${L_DEPS} ${L_LIBS})
  if(isa_srcs AND lib_srcs)
    foreach(isa ${COHORT_ISAS})
      string(TOUPPER ${isa} ISA)
      add_library(cohort_${L_NAME}_${isa} OBJECT ${isa_srcs})
      target_compile_definitions(cohort_${L_NAME}_${isa} PRIVATE COHORT_ISA_${ISA}=1)
      target_include_directories(cohort_${L_NAME}_${isa} PRIVATE ${PROJECT_SOURCE_DIR}
                                 ${PROJECT_BINARY_DIR}/include)
      target_link_libraries(cohort_${L_NAME}_${isa} PRIVATE ${L_DEPS} ${L_LIBS})
      target_sources(cohort_${L_NAME} PRIVATE $<TARGET_OBJECTS:cohort_${L_NAME}_${isa}>)
    endforeach()
  endif()
  if(test_srcs AND COHORT_BUILD_TESTS)
    add_executable(cohort_${L_NAME}_tests ${test_srcs})
    target_link_libraries(cohort_${L_NAME}_tests PRIVATE cohort_${L_NAME} ${L_TEST_LIBS}
                          GTest::gtest GTest::gtest_main GTest::gmock)
    gtest_discover_tests(cohort_${L_NAME}_tests DISCOVERY_TIMEOUT 60
                         PROPERTIES TIMEOUT 300)
  endif()
endfunction()
