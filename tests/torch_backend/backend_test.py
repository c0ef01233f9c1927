"""cohort's own tests of the cohort backend of torch.distributed: what
PyTorch's suite (dist_suite.py) does not cover. Every test runs real
processes (torch.multiprocessing spawn, or subprocess for a killed rank).

    PYTHONPATH=<build>/python python3 backend_test.py [-k NAME]
"""
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import cohort_torch  # noqa: F401  registers "cohort"

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init(rank, world, store, backend="cohort", timeout=60):
    dist.init_process_group(backend, init_method="file://" + store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout))


def _run(fn, world, *args):
    """Runs fn(rank, world, store, *args) on `world` processes; a failure in
    any of them fails the test with its traceback."""
    with tempfile.TemporaryDirectory() as d:
        mp.start_processes(fn, args=(world, os.path.join(d, "store"), *args), nprocs=world,
                           join=True, start_method="spawn")


# ---- every dtype and every reduction ----

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64, torch.bool]
OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
       "MAX": dist.ReduceOp.MAX, "BAND": dist.ReduceOp.BAND, "BOR": dist.ReduceOp.BOR,
       "BXOR": dist.ReduceOp.BXOR}


def _value(rank, dtype, n=9):
    # Small values, so that products of 3 ranks stay exact in every type.
    v = torch.tensor([(rank * 3 + i) % 4 for i in range(n)], dtype=torch.int64)
    if dtype == torch.bool:
        return (v % 2).to(torch.bool)
    return v.to(dtype)


def _expected(name, world, dtype):
    vals = [_value(r, dtype) for r in range(world)]
    if dtype == torch.bool:
        b = [v.to(torch.int64) for v in vals]
        acc = b[0]
        for x in b[1:]:
            if name in ("SUM", "MAX", "BOR"):
                acc = acc | x
            elif name in ("PRODUCT", "MIN", "BAND"):
                acc = acc & x
            else:
                acc = acc ^ x
        return acc.to(torch.bool)
    acc = vals[0].to(torch.float64) if dtype.is_floating_point else vals[0].clone()
    for x in vals[1:]:
        x = x.to(acc.dtype)
        if name == "SUM":
            acc = acc + x
        elif name == "PRODUCT":
            acc = acc * x
        elif name == "MIN":
            acc = torch.minimum(acc, x)
        elif name == "MAX":
            acc = torch.maximum(acc, x)
        elif name == "BAND":
            acc = acc & x
        elif name == "BOR":
            acc = acc | x
        else:
            acc = acc ^ x
    return acc.to(dtype)


def _every_dtype_and_op(rank, world, store):
    _init(rank, world, store)
    for dtype in DTYPES:
        for name, op in OPS.items():
            t = _value(rank, dtype)
            bitwise = name in ("BAND", "BOR", "BXOR")
            if bitwise and (dtype.is_floating_point):
                try:
                    dist.all_reduce(t, op=op)
                except RuntimeError as e:
                    assert name.lower() in str(e) and "integer" in str(e), str(e)
                    continue
                raise AssertionError(f"all_reduce {name} on {dtype} did not raise")
            dist.all_reduce(t, op=op)
            want = _expected(name, world, dtype)
            assert torch.equal(t, want), f"all_reduce {name} {dtype}: {t} != {want}"
            # reduce to the last rank, and reduce_scatter, the same way
            r = _value(rank, dtype)
            dist.reduce(r, dst=world - 1, op=op)
            if rank == world - 1:
                assert torch.equal(r, want), f"reduce {name} {dtype}: {r} != {want}"
    # AVG where cohort takes it: floating types
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert torch.allclose(t, torch.full((5,), (world + 1) / 2)), t
    dist.destroy_process_group()


# ---- data movement in any dtype ----

def _any_dtype_moves(rank, world, store):
    _init(rank, world, store)
    for dtype in (torch.complex64, torch.int16, torch.float32):
        x = (torch.arange(6) + 10 * rank).to(dtype)
        outs = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(outs, x)
        for r in range(world):
            assert torch.equal(outs[r], (torch.arange(6) + 10 * r).to(dtype)), (dtype, outs)
        b = x.clone()
        dist.broadcast(b, src=world - 1)
        assert torch.equal(b, (torch.arange(6) + 10 * (world - 1)).to(dtype))
    dist.destroy_process_group()


# ---- uneven all_to_all ----

def _all_to_all_uneven(rank, world, store):
    _init(rank, world, store)
    # Rank r sends (r + j) % 3 rows of 2 elements to rank j; row values name sender and receiver.
    in_splits = [(rank + j) % 3 for j in range(world)]
    out_splits = [(i + rank) % 3 for i in range(world)]
    rows = [torch.tensor([[100 * rank + j, k]]) for j in range(world) for k in range(in_splits[j])]
    inp = torch.cat(rows).float() if rows else torch.empty(0, 2)
    out = torch.full((sum(out_splits), 2), -1.0)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = [torch.tensor([[100 * i + rank, k]]) for i in range(world) for k in range(out_splits[i])]
    want = torch.cat(want).float() if want else torch.empty(0, 2)
    assert torch.equal(out, want), (out, want)
    # The list form with tensors of several sizes.
    ins = [torch.full((j + 1,), float(rank)) for j in range(world)]
    outs = [torch.empty(rank + 1) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for i in range(world):
        assert torch.equal(outs[i], torch.full((rank + 1,), float(i))), outs
    # Split sizes that do not add up to the rows: an error naming them, on every rank, before
    # any traffic (so the group stays usable).
    bad = [inp.shape[0] + 1] + [0] * (world - 1)
    try:
        dist.all_to_all_single(out, inp, out_splits, bad)
    except RuntimeError as e:
        assert "split sizes" in str(e) and "add up" in str(e), str(e)
    else:
        raise AssertionError("split sizes that do not add up were taken")
    dist.barrier()
    dist.destroy_process_group()


# ---- receive from any source ----

def _recv_any_source(rank, world, store):
    _init(rank, world, store)
    if rank == 0:
        seen = []
        for _ in range(world - 1):
            t = torch.empty(3)
            w = dist.irecv(t, tag=7)
            w.wait()
            src = w._source_rank() if hasattr(w, "_source_rank") else None
            assert torch.equal(t, torch.full((3,), float(int(t[0])))), t
            seen.append(int(t[0]))
            if src is not None:
                assert src == int(t[0]), (src, t)
        assert sorted(seen) == list(range(1, world)), seen
        # recv() with no source returns the sender's rank.
        got = dist.recv(torch.empty(3), tag=8)
        assert got == world - 1, got
    else:
        dist.send(torch.full((3,), float(rank)), dst=0, tag=7)
        if rank == world - 1:
            dist.send(torch.full((3,), float(rank)), dst=0, tag=8)
    dist.barrier()
    dist.destroy_process_group()


# ---- async Work and its future ----

def _async_work(rank, world, store):
    _init(rank, world, store)
    t = torch.ones(1000) * (rank + 1)
    w = dist.all_reduce(t, async_op=True)
    fut = w.get_future().then(lambda f: f.value()[0] * 2)
    assert torch.equal(fut.wait(), torch.full((1000,), 2.0 * world * (world + 1) / 2))
    assert w.is_completed() and w.is_success()
    assert w.wait(timeout=timedelta(seconds=10))
    # isend / irecv on a ring, both directions at once.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    out = torch.full((4,), float(rank))
    got = torch.empty(4)
    ws = [dist.isend(out, nxt), dist.irecv(got, prv)]
    for x in ws:
        x.wait()
    assert torch.equal(got, torch.full((4,), float(prv))), got
    dist.destroy_process_group()


# ---- errors name the rank, the op and the sequence number ----

def _mismatch(rank, world, store):
    _init(rank, world, store, timeout=20)
    dist.all_reduce(torch.ones(2))
    try:
        dist.all_reduce(torch.ones(4 if rank == 0 else 8))
    except RuntimeError as e:
        msg = str(e)
        assert "all_reduce" in msg and f"rank {rank}" in msg and "seq" in msg, msg
    else:
        raise AssertionError("a count mismatch between ranks passed")


def _monitored_barrier(rank, world, store):
    # PyTorch 1.13's dist.monitored_barrier() refuses every backend but gloo
    # by name; the group's own method is the same call underneath.
    _init(rank, world, store)
    pg = dist.distributed_c10d._get_default_group()
    if rank == 1:
        time.sleep(3)  # misses rank 0's 1 s window
    if rank == 0:
        try:
            pg.monitored_barrier(timeout=timedelta(seconds=1), wait_all_ranks=True)
        except RuntimeError as e:
            assert "Rank 1 failed to pass monitoredBarrier" in str(e), str(e)
        else:
            raise AssertionError("monitored_barrier passed with rank 1 missing")
    else:
        # Late: rank 0 has given up, and its verdict names this rank.
        try:
            pg.monitored_barrier(timeout=timedelta(seconds=5))
        except RuntimeError as e:
            assert "received errors while waiting for send/recv from rank 0" in str(e), str(e)
            assert "Rank 1 failed to pass monitoredBarrier" in str(e), str(e)
        else:
            raise AssertionError("rank 1 passed a barrier rank 0 failed")
    # Timeout 0 is 0, as gloo takes it.
    if rank == 0:
        try:
            pg.monitored_barrier(timeout=timedelta(seconds=0))
        except RuntimeError as e:
            assert "Rank 0 timed out in monitoredBarrier" in str(e), str(e)
        else:
            raise AssertionError("a monitored_barrier with timeout 0 passed")
    dist.barrier()
    dist.destroy_process_group()


class CohortBackendTest(unittest.TestCase):
    def test_every_dtype_and_reduce_op_2_ranks(self):
        _run(_every_dtype_and_op, 2)

    def test_every_dtype_and_reduce_op_3_ranks(self):
        _run(_every_dtype_and_op, 3)

    def test_ops_that_move_data_take_any_dtype(self):
        _run(_any_dtype_moves, 2)

    def test_all_to_all_with_uneven_splits(self):
        _run(_all_to_all_uneven, 3)

    def test_recv_from_any_source_names_the_sender(self):
        _run(_recv_any_source, 3)

    def test_async_work_future_and_isend_irecv(self):
        _run(_async_work, 2)

    def test_count_mismatch_is_an_error_naming_rank_op_and_seq(self):
        _run(_mismatch, 2)

    def test_monitored_barrier_names_the_missing_rank(self):
        _run(_monitored_barrier, 2)

    def test_torchrun_tutorial_ddp_gives_gloo_parameters(self):
        script = os.path.join(HERE, "tutorial_ddp.py")
        with tempfile.TemporaryDirectory() as d:
            states = {}
            for backend in ("gloo", "cohort"):
                ckpt = os.path.join(d, f"{backend}.pt")
                # Debian's torchrun (1.13, Python 3.11) needs --redirects 1 --tee 1.
                cmd = [PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                       "--redirects", "1", "--tee", "1", "--master_port", str(_free_port()),
                       script, backend, ckpt]
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=240,
                                   env=dict(os.environ, OMP_NUM_THREADS="1"))
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                states[backend] = torch.load(ckpt)
            for name, g in states["gloo"].items():
                c = states["cohort"][name]
                self.assertTrue(torch.allclose(g, c, rtol=0, atol=1e-6),
                                f"{name}: max |gloo - cohort| = {(g - c).abs().max().item()}")

    def test_cohort_run_starts_a_pytorch_job_on_env_init(self):
        cli = os.environ.get("COHORT_CLI", "")
        if not os.path.exists(cli):
            self.skipTest(f"the cohort CLI is not at COHORT_CLI={cli!r}")
        r = subprocess.run([cli, "run", "--nproc-per-node", "2", PYTHON,
                            os.path.join(HERE, "launcher_job.py")],
                           capture_output=True, text=True, timeout=240)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("launcher_job: ok native 2", r.stdout + r.stderr)

    def test_mpirun_starts_a_pytorch_job_over_mpi(self):
        mpirun = os.environ.get("COHORT_MPIRUN", "")
        if not mpirun or not cohort_torch._C._backend_available("mpi"):
            self.skipTest("this build has no MPI (COHORT_MPIRUN unset)")
        env = {k: v for k, v in os.environ.items()
               if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
        r = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "3", PYTHON,
                            os.path.join(HERE, "launcher_job.py")],
                           capture_output=True, text=True, timeout=240, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("launcher_job: ok mpi 3", r.stdout + r.stderr)

    def test_killed_rank_ends_ddp_job_naming_it(self):
        script = os.path.join(HERE, "killed_rank.py")
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, COHORT_FLIGHT_RECORDER_DIR=d)
            procs = [subprocess.Popen([PYTHON, script, str(r), "2", os.path.join(d, "store")],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True) for r in range(2)]
            outs = []
            for p in procs:
                try:
                    out, _ = p.communicate(timeout=120)
                except subprocess.TimeoutExpired:
                    for q in procs:
                        q.kill()
                    self.fail("a rank hung after its peer was killed")
                outs.append(out)
            self.assertEqual(procs[1].returncode, -signal.SIGKILL, outs[1])
            self.assertEqual(procs[0].returncode, 3, outs[0])
            self.assertRegex(outs[0], r"(?s)survivor saw: .*rank 1", outs[0])
            self.assertIn("ended after", outs[0])
            # The flight recorder's dump, as for cohort's own programs.
            dumps = [f for f in os.listdir(d) if "flight" in f]
            self.assertTrue(dumps, f"no flight record in {os.listdir(d)}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
