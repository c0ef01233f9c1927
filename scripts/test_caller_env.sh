#!/usr/bin/env bash
# Reruns a slice of the suite (in build/, built by scripts/test.sh) with every
# knob a caller might have set to an odd value: the suite must not depend on
# its caller's environment. ctest drops these before any test runs
# (cmake/CohortTestEnvironment.cmake.in); the slice holds the tests that would
# break first if one got through: the check of that scrub, the baseline-CPU run
# under qemu (OPENBLAS_CORETYPE=Haswell there is SIGILL), the launcher, spawn and
# env:// rendezvous, single-process and DDP training through the CLI, the
# multi-process collectives, the parity test against PyTorch, and Slurm.
#   scripts/test_caller_env.sh [CTEST_ARGS...]
set -euo pipefail
cd "$(dirname "$0")/../build"
export OPENBLAS_CORETYPE=Haswell OPENBLAS_NUM_THREADS=7 OPENBLAS_VERBOSE=2 GOTO_NUM_THREADS=5
export OMP_NUM_THREADS=13 OMP_PROC_BIND=true OMP_PLACES=cores
export COHORT_KERNELS=no-such-path COHORT_NUM_THREADS=banana COHORT_TRANSPORT=carrier-pigeon
export COHORT_LOG_LEVEL=shout COHORT_TOKEN=not-this-jobs-token COHORT_CONNECT_TIMEOUT=0
export COHORT_SHM_RING_BYTES=1 COHORT_SHM_SINGLE_COPY=0 COHORT_STORAGE_CACHE=-1 COHORT_DEVICE_TIMEOUT_S=-1
export COHORT_ALLREDUCE_ALGO=nonsense COHORT_BROADCAST_ALGO=nonsense COHORT_ADDR=203.0.113.9
export COHORT_SOCKET_IFNAME=nosuchif0 COHORT_FLIGHT_RECORDER_DIR=/nonexistent/dir
export COHORT_RESTART_COUNT=9 COHORT_STORE_HOSTED=1 COHORT_PARITY_PYTHON=/nonexistent/python
export MASTER_ADDR=203.0.113.1 MASTER_PORT=1 RANK=3 WORLD_SIZE=7 LOCAL_RANK=5 LOCAL_WORLD_SIZE=9
export GROUP_RANK=2 NODE_RANK=4 TORCHELASTIC_RUN_ID=odd
export SLURM_PROCID=4 SLURM_NTASKS=8 SLURM_LOCALID=3 SLURM_JOB_ID=77 SLURM_CPUS_PER_TASK=11
export SLURM_STEP_NODELIST='nohost[1-3]' SLURM_JOB_NODELIST='nohost[1-3]'
export OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_LOCAL_RANK=1 PMI_RANK=2 PMIX_RANK=2
slice='^(suite\.|portability\.|LaunchE2E\.|Spawn\.|Bootstrap\.|TrainCli\.|DDP\.|Processes\.|Transports/CollectivesTest\.|distributed\.suite\.(native\.(shm|tcp)|mpi)\.n2$|ddp\.example\.|examples\.cnn_ddp$|parity\.|SlurmStepEnv\.|slurm\.)'
exec ctest --output-on-failure --no-tests=error --timeout 600 -j "$(nproc)" -R "$slice" "$@"
