#!/usr/bin/env python3
"""python_modules.py — what profiler mode's nn.Module regions cost per step (not a test).

One process trains an MLP of --blocks blocks (Linear + ReLU each, in an
nn.Sequential: 2 × blocks + 1 modules, 3 × blocks + 1 with the leaves'
backward) under torch.profiler, one profiler cycle per step, with
tct.instrument(model, opt, profiler=True) and profiler_handler(). In the
same run it alternates, step by step:
  links     the handler assigns each operator its innermost module (parent);
  nolinks   the handler sends the same events and regions without parents;
and, in blocks of --block steps, with and without the module hooks (ranges)
installed. Figures are CPU time of this thread (time.thread_time_ns), the
median over the steps of each kind:
  handler_ns   the handler's work per cycle (= per step): links vs nolinks
               gives the cost of the parent assignment (sorting the events,
               the stack walk, the parent keys sent);
  link_only_ns the parent assignment alone (tracectl.torch._link on the
               cycle's events, ids from a counter), every step with modules;
  step_ns      forward + backward + optimizer.step under the profiler, with
               and without the module ranges (hooks).
JSON lines on stdout, a table on stderr. The daemon at $TRACECTL_SOCKET must
run (the entries are sent to it, as in real use).
"""

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn as nn

import tracectl.torch as tct


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--block", type=int, default=5, help="steps per hooks on/off block")
    a = p.parse_args()
    torch.set_num_threads(1)
    layers = []
    for _ in range(a.blocks):
        layers += [nn.Linear(a.width, a.width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(a.width, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(32, a.width)
    tct.open(session="bench-modules", device="cpu:0")
    res = {"links": [], "nolinks": [], "hooks": [], "nohooks": [], "link_only": []}
    events = []
    state = {"links": True}

    class Ids:  # region_id() without a client: _link's own work alone
        n = 0

        def region_id(self):
            self.n += 1
            return self.n

    def handler(prof):
        c = tct.client()
        if state["links"] is not None:
            ev = [e for e in prof.events() if str(e.device_type) == "DeviceType.CPU" and
                  not e.name.startswith(("[memory]", "ProfilerStep"))]
            t0 = time.thread_time_ns()
            tct._link(Ids(), ev)
            res["link_only"].append(time.thread_time_ns() - t0)
        t0 = time.thread_time_ns()
        n = tct._stream_events(c, prof, True, state["links"] is not False)
        if state["links"] is not None:
            res["links" if state["links"] else "nolinks"].append(time.thread_time_ns() - t0)
            events.append(n)

    ins = None
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=torch.profiler.schedule(wait=0, warmup=0, active=1),
                                on_trace_ready=handler) as prof:
        for s in range(a.steps):
            hooks = (s // a.block) % 2 == 0
            if hooks and ins is None:
                ins = tct.instrument(model, opt, profiler=True)
            elif not hooks and ins is not None:
                ins.remove()
                ins = None
            state["links"] = s % 2 == 0
            t0 = time.thread_time_ns()
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            res["hooks" if hooks else "nohooks"].append(time.thread_time_ns() - t0)
            if not hooks:  # the handler's figures are for steps with modules only
                state["links"] = None
            prof.step()
            tct.step()
    c = tct.client()
    c.flush(timeout=60)
    dropped = c.dropped
    tct.close()
    # the first cycle of each kind warms up: dropped from the medians
    med = {k: statistics.median(v[1:]) for k, v in res.items() if len(v) > 1}
    out = {"bench": "python_modules", "blocks": a.blocks, "width": a.width, "steps": a.steps,
           "events_per_step_median": statistics.median(events), "dropped": dropped}
    out.update({k + "_ns": v for k, v in med.items()})
    out["links_added_ns"] = med["links"] - med["nolinks"]
    out["hooks_added_ns"] = med["hooks"] - med["nohooks"]
    print(json.dumps(out))
    print("events/step %d, dropped %d" % (out["events_per_step_median"], dropped), file=sys.stderr)
    print("handler per step: links %.0f µs, no links %.0f µs (%.2f ×, +%.0f µs)" %
          (med["links"] / 1e3, med["nolinks"] / 1e3, med["links"] / med["nolinks"],
           out["links_added_ns"] / 1e3), file=sys.stderr)
    print("parent assignment alone (_link): %.0f µs per step, %.2f µs per event" %
          (med["link_only"] / 1e3, med["link_only"] / 1e3 / out["events_per_step_median"]),
          file=sys.stderr)
    print("step (fwd+bwd+opt) under the profiler: ranges %.0f µs, none %.0f µs (%.2f ×)" %
          (med["hooks"] / 1e3, med["nohooks"] / 1e3, med["hooks"] / med["nohooks"]),
          file=sys.stderr)


if __name__ == "__main__":
    main()
