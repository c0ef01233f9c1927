#!/usr/bin/env bash
# The test suite under a sanitizer (CMakePresets.json):
#   scripts/sanitize.sh asan [--ci] [CTEST_ARGS...]   AddressSanitizer + UBSan, build-asan/
#   scripts/sanitize.sh tsan [--ci|--layers] [CTEST_ARGS...]   ThreadSanitizer, build-tsan/
# --ci builds and runs the layers that move bytes between processes and parse
# what others send, below the tensor library -- transport, rendezvous, launch,
# collectives, rpc, and the TcpStore and wire fuzz corpora -- and base (the
# thread pool), which fits CI's budget on 2 cores: scripts/test.sh runs it
# under both sanitizers when CI is set.
# --layers (meant for tsan) builds and runs every layer that runs threads of
# its own: the unit tests of base (thread pool), transport, rendezvous (the
# TcpStore server), launch, collectives (engine threads), distributed (work
# queue), rpc (I/O and handler threads), autograd (concurrent backward) and
# parallel (inter-op, DataParallel, parameter server), selected by their
# ctest label (cmake/CohortLayer.cmake), and the end-to-end tests that run
# those layers' threads in real jobs: `cohort run` with its watchers
# (tests/launch), the collective suite and faults through ProcessGroup
# (tests/distributed), DDP (its reducer's hooks on the engine threads),
# tensor parallelism and the parameter server (tests/ddp, tests/tensor_parallel,
# tests/parameter_server). docs/testing.md records its last run.
# Without either: everything (run it before a release; the closing notes
# record its results).
# Excluded, and why: install.* (they configure and build the whole project
# again, with its own flags: packaging, not memory safety); portability.* (they
# run the binary under qemu-user, which cannot map the sanitizers' shadow
# memory); LaunchE2E.CrashedWorkerIsNamedWithItsSignal (its worker raises
# SIGSEGV on purpose, which the sanitizer turns into exit code 1 before the
# launcher can see the signal).
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-}"
shift || true
mode=all
case "${1:-}" in
  --ci) mode=ci; shift ;;
  --layers) mode=layers; shift ;;
esac
case "$kind" in
  asan) preset=asan-ubsan; dir=build-asan ;;
  tsan) preset=tsan; dir=build-tsan ;;
  *) echo "usage: scripts/sanitize.sh asan|tsan [--ci|--layers] [ctest args]" >&2; exit 2 ;;
esac
supp="$PWD/scripts/sanitizers"
# Leaks are errors; a report stops the test (so ctest shows it) and prints where.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0:suppressions=$supp/asan.supp"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# atexit_sleep_ms=0: TSan sleeps 1 s in every exiting process (even in _exit) by
# default, to catch races at exit; tests that kill or end a process and expect
# its peers to notice within a bound would measure that sleep instead.
# die_after_fork=0: cohort starts threads in a child forked from a threaded
# process by design (the thread pool's atfork handler, spawn, the tests'
# forked ranks); TSan kills such a child by default. Its runtime holds its
# own locks across fork, so the child's reports stay sound.
export TSAN_OPTIONS="halt_on_error=1:atexit_sleep_ms=0:die_after_fork=0:second_deadlock_stack=1:suppressions=$supp/tsan.supp"
cmake --preset "$preset" >/dev/null
exclude='^(install|portability)\.|^LaunchE2E\.CrashedWorkerIsNamedWithItsSignal$'
run_ctest() { ctest --output-on-failure --timeout 900 -j "$(nproc)" -E "$exclude" "$@"; }
case "$mode" in
  ci)
    nice cmake --build "$dir" -j "$(nproc)" --target cohort_base_tests cohort_transport_tests \
      cohort_rendezvous_tests cohort_launch_tests cohort_collectives_tests cohort_rpc_tests \
      fuzz_replay_tcp_store fuzz_replay_transport_wire
    # The test suites of those programs (tests of programs not built are not registered).
    include='^(Error|KernelPath|ParallelFor|ThreadBudget|Tracer|Context|Endpoint|Network|PeerAddress|ShmPair|Socket|AllStores|Bootstrap|FileStore|ParseInitMethod|PrefixStore|TcpStore|ChildProcess|CpuSplit|LinePrefixer|Spawn|Failure|FlightRecorder|Paths/ReduceKernelPaths|Processes|ReduceKernels|Transports|RpcAgent|tcp\.RpcAgent|fuzz\.replay\.(tcp_store|transport_wire))'
    cd "$dir"
    run_ctest -R "$include" "$@"
    ;;
  layers)
    layers=(base transport rendezvous launch collectives distributed rpc autograd parallel)
    targets=()
    for l in "${layers[@]}"; do targets+=("cohort_${l}_tests"); done
    targets+=(cohort cohort_launch_test_worker cohort_launch_e2e_tests cohort_launch_multinode_tests
              cohort_collective_suite cohort_distributed_fault_tests cohort_ddp_tests
              cohort_ddp_fault_tests cohort_tensor_parallel_tests cohort_parameter_server_tests)
    nice cmake --build "$dir" -j "$(nproc)" --target "${targets[@]}"
    cd "$dir"
    # Both runs, then one verdict.
    rc=0
    labels="^($(IFS='|'; echo "${layers[*]}"))\$"
    run_ctest -L "$labels" "$@" || rc=1
    e2e='^(LaunchE2E|LaunchMultiNode|DistributedFault)\.|^distributed\.suite\.native\.'
    e2e+='|^(tcp\.)?(DDP|DDPFault|TensorParallel|ParameterServer(Async|Fault|Ssp|Sync)|DistributedOptimizer)\.'
    run_ctest -R "$e2e" "$@" || rc=1
    exit $rc
    ;;
  all)
    nice cmake --build "$dir" -j "$(nproc)"
    cd "$dir"
    run_ctest "$@"
    ;;
esac
