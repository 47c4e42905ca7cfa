#!/usr/bin/env python3
"""ddp_train.py — a real DistributedDataParallel training job on CPU that reports to tracectld.

    python3 examples/ddp_train.py --ranks 4 --slow-rank 2
    tracectl report <the session it prints>

Starts --ranks processes (forked from this one) that form a gloo process group
and train a small MLP on synthetic data for --steps steps. The rank named by
--slow-rank runs a throttled layer (it sleeps --slow-ms per forward, as a slow
or shared device would), so the other ranks wait for it in every gradient
allreduce. With --mode light (the default) each rank records through
tracectl.torch: per leaf module .forward/.backward, optimizer.step, DDP's
allreduce per bucket and the final barrier (comm), the collectives with their
communicator and sequence number; --mode profiler streams torch.profiler's
operators instead, under the model's modules (tct.instrument(...,
profiler=True): `tracectl report SESSION --by module`); --mode off traces nothing (the baseline);
--mode chrome runs plain torch.profiler writing Chrome traces to --chrome-dir
(the profiler-mode baseline).

Per rank and step, light mode records 4 forward + 4 backward + 1
optimizer.step + 1 allreduce entries (the model fits one DDP bucket), plus one
barrier at the end. --pause-after K makes every rank flush after step K, print
"paused rank R step K" and wait until --resume-file exists (a test takes a
report of the live session meanwhile). Each rank prints "done rank R recorded N
dropped D" at the end; the parent prints "session NAME".
"""

import argparse
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import tracectl.torch as tct


class Throttle(nn.Module):
    """Scales its input by 1; on a slowed rank it first sleeps slow_ms."""

    def __init__(self, slow_ms: float):
        super().__init__()
        self.slow_s = slow_ms / 1000.0

    def forward(self, x):
        if self.slow_s > 0:
            with torch.autograd.profiler.record_function("throttle"):  # shows in profiler mode
                time.sleep(self.slow_s)
        return x * 1.0


def make_model(slow_ms: float) -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), Throttle(slow_ms), nn.Linear(64, 8))


def train(rank: int, a: argparse.Namespace, store: str) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank,
                            world_size=a.ranks)
    net = make_model(a.slow_ms if rank == a.slow_rank else 0.0)
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tc = None
    prof = None
    if a.mode in ("light", "profiler"):
        tc = tct.open(session=a.session)
        tc.meta("example", "ddp_train")
        tc.meta("slow_rank", a.slow_rank)
    if a.mode == "light":
        tct.instrument(net, opt)
        tct.instrument_ddp(model)
        tct.instrument_distributed()
    elif a.mode in ("profiler", "chrome"):
        if a.mode == "profiler":
            tct.instrument(net, opt, profiler=True)
        cycles = [0]

        def chrome(p):  # --chrome-dir: also each cycle's Chrome trace, as plain torch.profiler
            if a.chrome_dir:
                cycles[0] += 1
                p.export_chrome_trace(os.path.join(a.chrome_dir, "rank%d.%d.json" % (rank, cycles[0])))
        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
            profile_memory=True, schedule=torch.profiler.schedule(wait=0, warmup=0, active=2),
            on_trace_ready=tct.profiler_handler(then=chrome) if a.mode == "profiler" else chrome)
        prof.start()
    x = torch.randn(a.batch, 32)
    y = torch.randn(a.batch, 8)
    t_steps = []
    for s in range(a.steps):
        t0 = time.perf_counter_ns()
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        t_steps.append(time.perf_counter_ns() - t0)
        if prof is not None:
            prof.step()
        tct.step()
        if a.pause_after and s + 1 == a.pause_after and tc is not None:
            tc.flush(timeout=30)
            print("paused rank %d step %d" % (rank, s + 1), flush=True)
            while not os.path.exists(a.resume_file):
                time.sleep(0.01)
    if prof is not None:
        prof.stop()
    dist.barrier()
    t_steps.sort()
    med = t_steps[len(t_steps) // 2] if t_steps else 0
    if tc is not None:
        tc.flush(timeout=30)
        print("done rank %d recorded %d dropped %d step_median_ns %d" %
              (rank, tc.recorded, tc.dropped, med), flush=True)
        tct.close()
    else:
        print("done rank %d recorded 0 dropped 0 step_median_ns %d" % (rank, med), flush=True)
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--slow-rank", type=int, default=-1, help="the rank to slow down (-1: none)")
    p.add_argument("--slow-ms", type=float, default=30.0, help="its extra time per step")
    p.add_argument("--mode", choices=("light", "profiler", "off", "chrome"), default="light")
    p.add_argument("--session", help="the session name (default: made up by rank 0)")
    p.add_argument("--chrome-dir", default="", help="profiler mode: also write Chrome traces here")
    p.add_argument("--pause-after", type=int, default=0, metavar="K")
    p.add_argument("--resume-file", default="")
    a = p.parse_args()
    traced = a.mode in ("light", "profiler")
    if a.session is None and traced:
        a.session = os.environ.get("TRACECTL_SESSION") or "ddp-%s" % time.strftime("%H%M%S")
    if traced:
        print("session %s" % a.session, flush=True)
    # fork: the ranks share the parent's imported torch instead of importing it again.
    # The ranks meet through a file store in a fresh directory (no TCP port to race for).
    with tempfile.TemporaryDirectory(prefix="ddp_train.") as d:
        mp.start_processes(train, args=(a, os.path.join(d, "store")), nprocs=a.ranks,
                           start_method="fork")
    return 0


if __name__ == "__main__":
    sys.exit(main())
