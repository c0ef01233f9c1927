# cohort_find_torch_backend(<have_var> <why_var>): whether the cohort backend
# of torch.distributed can be built here. Sets <have_var> to 1 or 0 and
# <why_var> to what is missing; on success also COHORT_TORCH_PYTHON_LIBRARY
# (libtorch_python, which holds c10d's Python bindings) and
# COHORT_PYTHON_VERSION (3.X, for where `cmake --install` puts cohort_torch).
function(cohort_find_torch_backend have why)
  set(${have} 0 PARENT_SCOPE)
  if(NOT COHORT_HAVE_LIBTORCH)
    set(${why} "the LibTorch adapter is not built (needs libtorch-dev)" PARENT_SCOPE)
    return()
  endif()
  if(NOT EXISTS ${COHORT_PYTHON})
    set(${why} "no Python at COHORT_PYTHON=${COHORT_PYTHON}" PARENT_SCOPE)
    return()
  endif()
  execute_process(
    COMMAND ${COHORT_PYTHON} -c "import os, torch; print(os.path.dirname(torch.__file__))"
    OUTPUT_VARIABLE torch_dir OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
  if(NOT rc EQUAL 0)
    set(${why} "${COHORT_PYTHON} cannot import torch (Debian: python3-torch)" PARENT_SCOPE)
    return()
  endif()
  find_library(COHORT_TORCH_PYTHON_LIBRARY torch_python HINTS ${torch_dir}/lib NO_DEFAULT_PATH)
  if(NOT COHORT_TORCH_PYTHON_LIBRARY)
    set(${why} "libtorch_python is not in ${torch_dir}/lib" PARENT_SCOPE)
    return()
  endif()
  set(PYTHON_EXECUTABLE ${COHORT_PYTHON} CACHE FILEPATH "" FORCE)
  find_package(pybind11 CONFIG QUIET)
  if(NOT pybind11_FOUND)
    set(${why} "pybind11 is not found (Debian: pybind11-dev, python3-dev)" PARENT_SCOPE)
    return()
  endif()
  # PyTorch 2.x moved the ops into c10d::Backend: this backend implements
  # 1.13's ProcessGroup interface, so check the headers have it.
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS})
  set(CMAKE_REQUIRED_FLAGS "-std=c++17 ${TORCH_CXX_FLAGS}")
  set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)  # compile only: the headers decide
  check_cxx_source_compiles([=[
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
struct P : c10d::ProcessGroup {
  P() : c10d::ProcessGroup(0, 1) {}
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>&,
                                           const c10d::AllreduceOptions&) override { return {}; }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>&, int) override { return {}; }
};
int main() { return 0; }
]=] COHORT_TORCH_PROCESS_GROUP_113)
  if(NOT COHORT_TORCH_PROCESS_GROUP_113)
    set(${why} "this PyTorch's c10d::ProcessGroup is not 1.13's (PyTorch 2.x's c10d::Backend is not supported yet)" PARENT_SCOPE)
    return()
  endif()
  # The install rule (cohort/torch_backend/CMakeLists.txt) needs the version
  # for <prefix>/lib/python3.X/dist-packages.
  execute_process(
    COMMAND ${COHORT_PYTHON} -c "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"
    OUTPUT_VARIABLE pyver OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  set(COHORT_PYTHON_VERSION ${pyver} CACHE INTERNAL "")
  set(${have} 1 PARENT_SCOPE)
  set(${why} "" PARENT_SCOPE)
endfunction()
