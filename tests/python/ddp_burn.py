"""ddp_burn.py — a small DDP job (gloo, CPU) for test_verdict_ddp.py.

One rank may burn a known time per step inside a non-leaf module's own code
(outside its children) in known steps; the ranks may read their batches
through a DataLoader with forked workers that record what they do. The job
measures with its own clock what the tests compare the report with, and
prints it as one JSON line per rank: {"rank", "burn_ns": {step: ns},
"step0_ns", "steps", "bwd_ns": {step: ns of backward() + optimizer.step()},
"allreduces": {step: DDP's bucket allreduces issued}, "rq_ns": {step: ns its main
thread had waited on a run queue by the step's end, cumulative}}. --hog-rank makes one rank
wait for a CPU in --hog-steps: its main thread is pinned to one CPU beside a
process that spins there. --mode profiler records
through torch.profiler (tct.profiler_handler()) instead of light mode's hooks;
--width and --bucket-mb give DDP several buckets.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import tracectl.torch as tct


class Block(nn.Module):
    """A non-leaf module: two children, and on the burning rank its own code sleeps first."""

    def __init__(self, burn: dict, width: int = 64):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.act = nn.ReLU()
        self.burn = burn  # step -> seconds
        self.step = 0
        self.measured = {}  # step -> ns slept, by the job's clock

    def forward(self, x):
        s = self.burn.get(self.step)
        if s:
            t0 = time.monotonic_ns()
            time.sleep(s)
            self.measured[self.step] = time.monotonic_ns() - t0
        return self.act(self.fc(x))


class Batches(torch.utils.data.Dataset):
    """Batches whose loading takes load_s, recorded by the worker that loads them."""

    def __init__(self, n: int, load_s: float):
        self.n, self.load_s = n, load_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        t0 = time.monotonic_ns()
        time.sleep(self.load_s)
        c = tct.client()
        if c is not None:
            c.record("load_batch", t0, time.monotonic_ns() - t0, 0, None, None, None, "other")
        g = torch.Generator().manual_seed(i)
        return torch.randn(64, 32, generator=g), torch.randn(64, 8, generator=g)


def run_delay() -> int:
    """ns this thread has waited on a CPU's run queue (/proc/thread-self/schedstat)."""
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[1])


SPIN = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


class Hog:
    """Processes spinning on the CPU this thread is pinned to, from start() to stop()."""

    def __init__(self, n: int):
        self.n, self.procs, self.cpus = n, [], None

    def start(self):
        self.cpus = os.sched_getaffinity(0)
        cpu = min(self.cpus)
        os.sched_setaffinity(0, {cpu})
        self.procs = [subprocess.Popen([sys.executable, "-c", SPIN, str(cpu)])
                      for _ in range(self.n)]

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()
        if self.procs:
            os.sched_setaffinity(0, self.cpus)
        self.procs = []


def train(rank: int, a: argparse.Namespace, store: str) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank,
                            world_size=a.ranks)
    first, last = (int(x) for x in a.burn_steps.split(":"))
    burn = {s: a.burn_ms / 1000.0 for s in range(first, last + 1)} if rank == a.burn_rank else {}
    block = Block(burn, a.width)
    net = nn.Sequential(nn.Linear(32, a.width), block, nn.Linear(a.width, 8))
    model = DDP(net, bucket_cap_mb=a.bucket_mb) if a.bucket_mb else DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tct.open(session=a.session)
    prof = None
    if a.mode == "profiler":
        tct.instrument(net, opt, profiler=True)
        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(wait=0, warmup=0, active=2),
            on_trace_ready=tct.profiler_handler())
        prof.start()
    else:
        tct.instrument(net, opt, modules=a.modules)
    tct.instrument_ddp(model)
    tct.instrument_distributed()
    # DDP's bucket allreduces, counted by the job: its comm hook calls dist.all_reduce
    allreduces = {}
    wrapped = dist.all_reduce

    def counting(*args, **kwargs):
        allreduces[block.step] = allreduces.get(block.step, 0) + 1
        return wrapped(*args, **kwargs)
    dist.all_reduce = counting
    if a.workers > 0:
        data = iter(torch.utils.data.DataLoader(Batches(a.steps, a.load_ms / 1000.0),
                                                batch_size=None, num_workers=a.workers,
                                                multiprocessing_context="fork"))
    else:
        g = torch.Generator().manual_seed(rank)
        data = iter([(torch.randn(a.batch, 32, generator=g), torch.randn(a.batch, 8, generator=g))] *
                    a.steps)
    step0 = 0
    bwd = {}
    rq = {}
    hog_first, hog_last = (int(x) for x in a.hog_steps.split(":"))
    hog = Hog(a.hogs) if rank == a.hog_rank else None
    for s in range(a.steps):
        if hog is not None and s == hog_first:
            hog.start()
        x, y = next(data)
        block.step = s
        t0 = time.monotonic_ns()
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        t1 = time.monotonic_ns()
        loss.backward()
        opt.step()
        t2 = time.monotonic_ns()
        bwd[s] = t2 - t1
        if s == 0:
            step0 = t2 - t0
        if prof is not None:
            prof.step()
        rq[s] = run_delay()  # tct.step() reads it too: the two readings are µs apart
        tct.step()
        if hog is not None and s == hog_last:
            hog.stop()
    if prof is not None:
        prof.stop()
    dist.all_reduce = wrapped
    dist.barrier()
    tct.close()
    print(json.dumps({"rank": rank, "burn_ns": block.measured, "step0_ns": step0,
                      "steps": a.steps, "bwd_ns": bwd, "allreduces": allreduces,
                      "rq_ns": rq}), flush=True)
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=3)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--session", required=True)
    p.add_argument("--burn-rank", type=int, default=-1)
    p.add_argument("--burn-ms", type=float, default=0.0)
    p.add_argument("--burn-steps", default="0:-1", help="first:last step of the burn")
    p.add_argument("--modules", default="leaf", choices=("leaf", "all"))
    p.add_argument("--mode", default="light", choices=("light", "profiler"))
    p.add_argument("--width", type=int, default=64, help="the layers' width")
    p.add_argument("--batch", type=int, default=64, help="rows per batch (no workers)")
    p.add_argument("--bucket-mb", type=float, default=0.0, help="DDP's bucket_cap_mb (0: DDP's)")
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers (fork)")
    p.add_argument("--load-ms", type=float, default=20.0, help="a worker's time per batch")
    p.add_argument("--hog-rank", type=int, default=-1, help="the rank that waits for a CPU")
    p.add_argument("--hog-steps", default="0:-1", help="first:last step it waits in")
    p.add_argument("--hogs", type=int, default=3, help="processes spinning beside it")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddp_burn.") as d:
        mp.start_processes(train, args=(a, os.path.join(d, "store")), nprocs=a.ranks,
                           start_method="fork")
    return 0


if __name__ == "__main__":
    sys.exit(main())
