"""ddp_burn.py — a small DDP job (gloo, CPU) for test_verdict_ddp.py.

One rank may burn a known time per step inside a non-leaf module's own code
(outside its children) in known steps; the ranks may read their batches
through a DataLoader with forked workers that record what they do. The job
measures with its own clock what the tests compare the report with, and
prints it as one JSON line per rank: {"rank", "burn_ns": {step: ns},
"step0_ns", "steps"}.
"""

import argparse
import json
import os
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

    def __init__(self, burn: dict):
        super().__init__()
        self.fc = nn.Linear(64, 64)
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


def train(rank: int, a: argparse.Namespace, store: str) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank,
                            world_size=a.ranks)
    first, last = (int(x) for x in a.burn_steps.split(":"))
    burn = {s: a.burn_ms / 1000.0 for s in range(first, last + 1)} if rank == a.burn_rank else {}
    block = Block(burn)
    net = nn.Sequential(nn.Linear(32, 64), block, nn.Linear(64, 8))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tct.open(session=a.session)
    tct.instrument(net, opt, modules=a.modules)
    tct.instrument_ddp(model)
    tct.instrument_distributed()
    if a.workers > 0:
        data = iter(torch.utils.data.DataLoader(Batches(a.steps, a.load_ms / 1000.0),
                                                batch_size=None, num_workers=a.workers,
                                                multiprocessing_context="fork"))
    else:
        g = torch.Generator().manual_seed(rank)
        data = iter([(torch.randn(64, 32, generator=g), torch.randn(64, 8, generator=g))] *
                    a.steps)
    step0 = 0
    for s in range(a.steps):
        x, y = next(data)
        block.step = s
        t0 = time.monotonic_ns()
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if s == 0:
            step0 = time.monotonic_ns() - t0
        tct.step()
    dist.barrier()
    tct.close()
    print(json.dumps({"rank": rank, "burn_ns": block.measured, "step0_ns": step0,
                      "steps": a.steps}), flush=True)
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
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers (fork)")
    p.add_argument("--load-ms", type=float, default=20.0, help="a worker's time per batch")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddp_burn.") as d:
        mp.start_processes(train, args=(a, os.path.join(d, "store")), nprocs=a.ranks,
                           start_method="fork")
    return 0


if __name__ == "__main__":
    sys.exit(main())
