"""cohort's collectives as a torch.distributed backend.

    import cohort_torch                      # registers the backend "cohort"
    import torch.distributed as dist
    dist.init_process_group("cohort")        # env://, file://, tcp://; torchrun, cohort run, ...

COHORT_TORCH_BACKEND (read here, at the edge) chooses what carries the
groups: "auto" (the default: native), "native" (shared memory on one host,
TCP between hosts), "mpi" (MPI_COMM_WORLD under mpirun; the world group only)
or "nccl". The other COHORT_* variables of cohort's own programs (transport,
algorithms, COHORT_FLIGHT_RECORDER_DIR, ...) apply as they do there.
Under `cohort run` (which serves its own store on MASTER_PORT), and under
mpirun or srun without RANK/WORLD_SIZE, env:// goes through cohort's
bootstrap (any backend's groups then meet over cohort's store); elsewhere
PyTorch's own env:// runs unchanged. See docs/pytorch_backend.md.
"""

import importlib
import os
from datetime import timedelta
from urllib.parse import urlparse

import torch.distributed as dist

from . import _C

ProcessGroupCohort = _C.ProcessGroupCohort

NAME = "cohort"
_BACKENDS = ("auto", "native", "mpi", "nccl")


def _backend_choice(world):
    choice = os.environ.get("COHORT_TORCH_BACKEND", "auto").strip().lower() or "auto"
    if choice not in _BACKENDS:
        raise ValueError(
            f"COHORT_TORCH_BACKEND={choice!r}: expected one of {', '.join(_BACKENDS)}")
    if choice == "auto":
        # As `cohort train --backend auto`: MPI carries the world under mpirun
        # (with no MASTER_ADDR, i.e. nobody set up a TCP rendezvous by hand).
        mpi = world and _C._mpirun_without_master() and _C._backend_available("mpi")
        return "mpi" if mpi else "native"
    return choice


def _timeout_ms(timeout):
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    return max(1, int(round(seconds * 1000)))


def _create(options, pg_options=None):
    """torch.distributed's factory (extended API): one cohort group per PyTorch group."""
    world = not options.global_ranks_in_group
    name = "default" if world else f"group {options.group_id}"
    return _C._create_process_group(options.store, options.group_rank, options.group_size,
                                    _timeout_ms(options.timeout), _backend_choice(world), name)


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


def _needs_cohort_rendezvous():
    """Where PyTorch's env:// cannot run: under `cohort run`, which serves
    its own store on MASTER_PORT (COHORT_STORE_HOSTED=1), and under mpirun or
    srun, which set their own variables instead of RANK and WORLD_SIZE."""
    env = os.environ
    if env.get("COHORT_STORE_HOSTED") == "1":
        return True
    launcher = "OMPI_COMM_WORLD_SIZE" in env or "SLURM_STEP_ID" in env
    return launcher and ("RANK" not in env or "WORLD_SIZE" not in env)


def _wrap_env_rendezvous(torch_handler):
    def handler(url, **kwargs):
        if not _needs_cohort_rendezvous():
            yield from torch_handler(url, **kwargs)
            return
        timeout = kwargs.get("timeout")
        query = dict(p.split("=", 1) for p in urlparse(url).query.split("&") if "=" in p)
        rank = int(query.get("rank", -1))
        world_size = int(query.get("world_size", -1))
        ms = _timeout_ms(timeout if timeout is not None else timedelta(minutes=30))
        yield _C._env_rendezvous(rank, world_size, ms)
        raise RuntimeError("env:// (cohort's rendezvous) cannot rendezvous again")

    handler._cohort = True
    return handler


if NAME.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(NAME, _create, extended_api=True)
# env:// through cohort's bootstrap where PyTorch's cannot run (see above);
# elsewhere (torchrun, hand-set variables) PyTorch's own, unchanged.
# (torch.distributed.rendezvous is also the name of a function: the module by its path.)
_handlers = importlib.import_module("torch.distributed.rendezvous")._rendezvous_handlers
if not getattr(_handlers.get("env"), "_cohort", False):
    _handlers["env"] = _wrap_env_rendezvous(_handlers["env"])
