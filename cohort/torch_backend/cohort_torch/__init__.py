"""cohort's collectives as a torch.distributed backend.

    import cohort_torch                      # registers the backend "cohort"
    import torch.distributed as dist
    dist.init_process_group("cohort")        # env://, file://, tcp://; torchrun, cohort run, ...

COHORT_TORCH_BACKEND (read here, at the edge) chooses what carries the
groups: "auto" (the default: native), "native" (shared memory on one host,
TCP between hosts), "mpi" (MPI_COMM_WORLD under mpirun; the world group only)
or "nccl". The other COHORT_* variables of cohort's own programs (transport,
algorithms, COHORT_FLIGHT_RECORDER_DIR, ...) apply as they do there.
See docs/pytorch_backend.md.
"""

import os
from datetime import timedelta

import torch.distributed as dist

from . import _C

ProcessGroupCohort = _C.ProcessGroupCohort

NAME = "cohort"
_BACKENDS = ("auto", "native", "mpi", "nccl")


def _backend_choice():
    choice = os.environ.get("COHORT_TORCH_BACKEND", "auto").strip().lower() or "auto"
    if choice not in _BACKENDS:
        raise ValueError(
            f"COHORT_TORCH_BACKEND={choice!r}: expected one of {', '.join(_BACKENDS)}")
    return choice


def _timeout_ms(timeout):
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    return max(1, int(round(seconds * 1000)))


def _create(options, pg_options=None):
    """torch.distributed's factory (extended API): one cohort group per PyTorch group."""
    world = not options.global_ranks_in_group
    name = "default" if world else f"group {options.group_id}"
    return _C._create_process_group(options.store, options.group_rank, options.group_size,
                                    _timeout_ms(options.timeout), _backend_choice(), name)


def _cohort_group(group=None):
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, ProcessGroupCohort):
        raise TypeError(f"{pg!r} is not a group of the cohort backend")
    return pg


def flight_record(group=None):
    """The last collectives of `group` (default: the world) as JSON."""
    return _cohort_group(group).flight_record()


def transport(peer, group=None):
    """How this rank reaches `peer` in `group`: 'shm', 'tcp', 'self' or 'mpi'."""
    return _cohort_group(group).transport(peer)


if NAME.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(NAME, _create, extended_api=True)
