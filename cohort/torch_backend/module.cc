// cohort_torch._C: the Python extension behind `import cohort_torch`
// (cohort_torch/__init__.py registers the backend name with
// torch.distributed). Built with the pybind11 that python3-torch was built
// with, so that PyTorch's own objects (the store the factory receives, the
// ProcessGroup base class) cross into it through pybind11's shared internals.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "cohort/torch_backend/process_group_cohort.h"

namespace py = pybind11;
using cohort::torch_backend::ProcessGroupCohort;

PYBIND11_MODULE(_C, m) {
  m.doc() = "cohort's collectives as a torch.distributed backend (docs/pytorch_backend.md)";
  // Registers c10d's Python classes (Store, ProcessGroup) that ours derive from.
  py::module::import("torch.distributed");

  py::class_<ProcessGroupCohort, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupCohort>>(
      m, "ProcessGroupCohort")
      .def(
          "flight_record", [](const ProcessGroupCohort& pg) { return pg.group()->flight_record(); },
          "The group's last collectives as JSON (cohort's flight recorder).")
      .def(
          "transport",
          [](const ProcessGroupCohort& pg, int peer) { return pg.group()->transport_name(peer); },
          py::arg("peer"), "How this rank reaches group rank `peer`: shm, tcp, self or mpi.")
      .def_property_readonly(
          "cohort_backend",
          [](const ProcessGroupCohort& pg) {
            return std::string(cohort::distributed::backend_name(pg.group()->backend()));
          },
          "The cohort backend carrying the group: native, mpi or nccl.")
      .def_property_readonly("group_name",
                             [](const ProcessGroupCohort& pg) { return pg.group()->name(); });

  m.def(
      "_create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, int64_t timeout_ms,
         const std::string& backend, const std::string& name) {
        return ProcessGroupCohort::create(store, rank, size, std::chrono::milliseconds(timeout_ms),
                                          backend, name);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout_ms"),
      py::arg("backend") = "auto", py::arg("name") = "default",
      py::call_guard<py::gil_scoped_release>());
}
