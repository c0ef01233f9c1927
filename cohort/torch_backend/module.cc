// cohort_torch._C: the Python extension behind `import cohort_torch`
// (cohort_torch/__init__.py registers the backend name with
// torch.distributed). Built with the pybind11 that python3-torch was built
// with, so that PyTorch's own objects (the store the factory receives, the
// ProcessGroup base class) cross into it through pybind11's shared internals.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "cohort/rendezvous/env_bootstrap.h"
#include "cohort/torch_backend/cohort_store.h"
#include "cohort/torch_backend/process_group_cohort.h"

namespace py = pybind11;
using cohort::torch_backend::CohortStore;
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

  py::class_<CohortStore, c10d::Store, c10::intrusive_ptr<CohortStore>>(
      m, "CohortStore", "PyTorch's Store over one of cohort's (cohort_store.h).");

  m.def(
      "_env_rendezvous",
      [](int rank, int world_size, int64_t timeout_ms) {
        cohort::torch_backend::Rendezvous r;
        {
          py::gil_scoped_release no_gil;  // waits for the other ranks
          r = cohort::torch_backend::env_rendezvous(rank, world_size,
                                                    std::chrono::milliseconds(timeout_ms));
        }
        return py::make_tuple(r.store, r.rank, r.world_size);
      },
      py::arg("rank"), py::arg("world_size"), py::arg("timeout_ms"),
      "cohort's env:// bootstrap: (store, rank, world_size); -1 = from the environment.");
  m.def("_mpirun_without_master", &cohort::rendezvous::env_mpirun_without_master,
        "Whether this process runs under mpirun with no MASTER_ADDR.");
  m.def(
      "_backend_available",
      [](const std::string& name) {
        return cohort::distributed::backend_available(cohort::distributed::parse_backend(name));
      },
      py::arg("name"));

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
