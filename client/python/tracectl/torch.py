"""tracectl.torch: stream a PyTorch job's modules, optimizer and collectives to tracectld.

Light mode (always-on, a few Python calls per module call):

    import tracectl.torch as tct

    dist.init_process_group("gloo")
    tc = tct.open()                       # rank, world and one session name from torch.distributed
    model = DDP(net)
    tct.instrument(net, optimizer)        # forward per module (nested), backward per leaf
    tct.instrument_ddp(model)             # DDP's gradient allreduce per bucket, and its wait
    tct.instrument_distributed()          # torch.distributed calls (category comm)
    for batch in data:
        ...
        tct.step()                        # the next step
    tct.close()

What is recorded:

- ``<path>:<class>.forward`` (e.g. ``fc1:Linear.forward``) for every module, nested as the
  model calls them (a module with children is a region of category ``module``; see
  instrument(); ``modules="leaf"``: leaf modules only, none nested),
  from its forward pre-hook to its forward hook, with the output's shape and
  bytes and the tensor inputs' shapes, on the compute device
  (``cpu:<rank>`` unless ``device=`` says otherwise);
- ``<name>.backward`` (leaf modules): from the moment the gradient of the module's output
  arrives (a hook on the output tensor) to the end of the autograd node that
  produced it (a hook on ``output.grad_fn``). For a leaf module made of one
  autograd op (Linear, Conv, activations) that is its whole backward; for a
  module made of several ops it is the last of them;
- ``optimizer.step`` on the compute device;
- ``allreduce_async`` for each DDP gradient bucket (its launch, bytes of the
  bucket) and ``allreduce_wait`` (category wait: the rank's wait for it at
  the end of backward; see instrument_ddp()), and ``all_reduce``, ``broadcast``, ``all_gather``,
  ``reduce_scatter``, ``barrier``, ``send``, ``recv``... for direct
  torch.distributed calls, with the bytes of their tensors, category
  ``comm``. Collectives carry **no device**: the report's Devices and Load
  imbalance sections then compare the ranks' compute, and a rank that waits
  for a slow one shows it as longer collectives, not as a slower device.
  Each collective carries its process group's ``comm`` (comm_id()),
  ``seq`` (the group's count of collectives before it on this rank) and
  ``comm_size`` (the group's number of ranks) in its ext map: the daemon
  matches the ranks' arrivals by comm and seq, and counts a collective of a
  subgroup complete once its members arrived.

Profiler mode: ``on_trace_ready=tct.profiler_handler()`` streams every
operator ``torch.profiler.profile`` recorded to the daemon at each profiler
cycle (see profiler_handler()); with ``tct.instrument(model, optimizer,
profiler=True)`` each module call is a region around its operators
(``tracectl report --by module``):

    tct.instrument(model, optimizer, profiler=True)
    with torch.profiler.profile(..., on_trace_ready=tct.profiler_handler()) as prof:
        for batch in data:
            ...
            prof.step()
            tct.step()
"""

from __future__ import annotations

import bisect
import inspect
import itertools
import os
import threading
import time
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set,
                    Tuple)

import torch
import torch.distributed as dist

import tracectl

__all__ = ["open", "close", "client", "step", "instrument", "instrument_ddp",
           "instrument_distributed", "uninstrument_distributed", "comm_id", "profiler_handler",
           "Instrumented"]

_client: Optional[tracectl.Client] = None
_device: Optional[str] = None
_step = 0  # tct.step() calls: profiler mode sets the client's step back to it
_now = time.monotonic_ns  # CLOCK_MONOTONIC: the clock entries use
_tls = threading.local()  # .inside: a wrapped collective is running (no double records)

SESSION_ENV = ("TRACECTL_SESSION", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")


def open(session: Optional[str] = None, device: Optional[str] = None,
         **kwargs: Any) -> tracectl.Client:
    """Opens the bridge's client (tracectl.open()) with torch.distributed's rank and world.

    When torch.distributed is initialised and no session is named (argument or
    TRACECTL_SESSION, SLURM_JOB_ID, TORCHELASTIC_RUN_ID), rank 0 makes one up
    (``torch-<date>-<pid>``) and broadcasts it, so that every rank joins the
    same session: call it on every rank. ``device`` is the compute device the
    module and optimizer entries name (default ``$TRACECTL_DEVICE``, else
    ``cpu:<rank>``); the client's own device is left empty so that
    collectives carry none. Other arguments go to tracectl.open().
    """
    global _client, _device
    rank = world = None
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        if session is None and not any(os.environ.get(k) for k in SESSION_ENV):
            name: List[Optional[str]] = [None]
            if rank == 0:
                name[0] = "torch-%s-%d" % (time.strftime("%Y%m%d-%H%M%S"), os.getpid())
            dist.broadcast_object_list(name, src=0)
            session = name[0]
    _device = device or os.environ.get("TRACECTL_DEVICE") or (
        "cpu:%d" % rank if rank is not None else "cpu")
    kwargs.setdefault("rank", rank)
    kwargs.setdefault("world", world)
    _client = tracectl.open(session=session, device="", **kwargs)
    _client.meta("torch", torch.__version__)
    if rank is not None:
        _client.meta("backend", str(dist.get_backend()))
    return _client


def client() -> Optional[tracectl.Client]:
    """The bridge's client (None before open())."""
    return _client


def step() -> None:
    """Advances the step every later entry records (use it rather than the client's step()).

    On Linux it also sends how long the calling thread waited for a CPU (on a run queue) in
    the step that ends, since open() or the last step() on that thread (the client's
    cpu_wait(), libtracectl's tc_cpu_wait(): the metadata ``tracectl.cpu_wait`` =
    ``"<step> <ns>"``, one read of /proc/thread-self/schedstat per step). The report's
    ``cpu_wait_ns`` and the verdict use it: a rank late because the machine had more busy
    threads than CPUs is not named as the culprit.
    """
    global _step
    _step += 1
    if _client is not None:
        _client.cpu_wait()  # the step that ends: the client's step is still _step - 1
        _client.step()


def close(strict: bool = False) -> Optional[Dict[str, Any]]:
    """Closes the bridge's client (flush, bye) and returns its status (None without one).

    As ``tracectl.Client.close()``: a stopped or lost daemon never fails the
    job (the status says what was stored, dropped and unconfirmed, and the
    error); ``strict=True`` raises ``tracectl.Error`` instead.
    """
    global _client
    c, _client = _client, None
    if c is None:
        return None
    return c.close(strict=strict)


def _shape(t: Any) -> Optional[Tuple[int, ...]]:
    return tuple(t.shape) if isinstance(t, torch.Tensor) else None


def _nbytes(t: Any) -> int:
    if isinstance(t, torch.Tensor):
        return t.numel() * t.element_size()
    if isinstance(t, (list, tuple)):
        return sum(_nbytes(x) for x in t)
    return 0


class Instrumented:
    """The hooks instrument() placed; remove() takes them away."""

    def __init__(self) -> None:
        self.handles: List[Any] = []
        self.undo: List[Callable[[], None]] = []

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        for u in self.undo:
            u()
        self.handles, self.undo = [], []


def instrument(model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer] = None, *,
               modules: Optional[str] = None, backward: bool = True, shapes: bool = True,
               prefix: str = "", profiler: bool = False) -> Instrumented:
    """Hooks on model's modules (and optimizer.step) that record into the client.

    Light mode (``profiler=False``): ``modules`` is "all" (the default) or
    "leaf". With "all" every module's forward is an entry, each one nested in
    the module that called it: a module with children is a region (category
    ``module``, an ext ``id``) and what runs inside it names it as its
    ``parent`` (PROTOCOL.md "Links between entries"), so that no time is
    counted twice and time a module spends outside its children is in its
    region, not lost: the report's untracked time (a step's span outside
    every top-level entry) stays small on a plain model. "leaf" records only
    the modules without children, none nested (compute spent in a non-leaf
    module's own code is then untracked). Entries are named ``<prefix><module path>.forward`` and ``.backward``, the
    path being ``<path in model>:<class>``, e.g. ``fc1:Linear.forward`` (the
    root module: its class alone). With ``shapes`` the output's and tensor
    inputs' shapes go with each forward entry. Call open() first; the hooks
    record nothing while no client is open.

    Profiler mode (``profiler=True``, with profiler_handler()): the hooks
    record nothing themselves; while torch.profiler records, each module's
    forward (``modules`` "all", the default here, or "leaf"), each leaf
    module's backward (as light mode times it) and ``optimizer.step`` become
    profiler ranges of those names, which profiler_handler() sends as
    regions: entries with an ext ``id``, category ``module``, spanning the
    call, and every operator inside one (on the same thread, by time) with
    the innermost one's id as its ``parent``. ``tracectl report --by module``
    and the collapsed export then show the time per module and the
    module;op stacks. Outside a profiler's active steps a hook costs one
    check.
    """
    ins = Instrumented()
    if modules is None:
        modules = "all"
    if modules not in ("all", "leaf"):
        raise ValueError("modules is 'all' or 'leaf', not %r" % (modules,))
    for path, m in model.named_modules():
        leaf = next(m.children(), None) is None
        if modules == "leaf" and not leaf:
            continue
        name = prefix + (path + ":" if path else "") + type(m).__name__
        if profiler:
            ins.handles.extend(_range_module(m, name, backward and leaf))
        else:
            ins.handles.extend(_hook_module(m, name, backward and leaf, shapes,
                                            nest=modules == "all", region=not leaf))
    if optimizer is not None:
        ins.undo.append(_wrap_optimizer(optimizer, profiler))
    return ins


# Profiler ranges (torch's RecordFunction): the C++ binding when this torch has
# it (a few µs), else the record_function context manager.
_profiling: Callable[[], bool] = getattr(torch._C._autograd, "_profiler_enabled", lambda: True)
_regions: Set[str] = set()  # names of the ranges instrument(profiler=True) opens: regions


def _range_enter(name: str) -> Any:
    f = getattr(torch._C._autograd, "_record_function_with_args_enter", None)
    if f is not None:
        return f(name)
    r = torch.autograd.profiler.record_function(name)
    r.__enter__()
    return r


def _range_exit(h: Any) -> None:
    if isinstance(h, torch.autograd.profiler.record_function):
        h.__exit__(None, None, None)
    else:
        torch._C._autograd._record_function_with_args_exit(h)


def _range_module(m: torch.nn.Module, name: str, backward: bool) -> List[Any]:
    fwd, bwd = name + ".forward", name + ".backward"
    _regions.add(fwd)
    if backward:
        _regions.add(bwd)
    open_: List[Any] = []  # a module called inside itself: one range per call

    def pre(mod: Any, inputs: Any) -> None:
        open_.append(_range_enter(fwd) if _profiling() else None)

    def post(mod: Any, inputs: Any, out: Any) -> None:
        if not open_:
            return
        h = open_.pop()
        if h is not None:
            _range_exit(h)
        o = out[0] if isinstance(out, (tuple, list)) and out else out
        if backward and h is not None and isinstance(o, torch.Tensor) and o.grad_fn is not None:
            _range_backward(o, bwd)

    return [m.register_forward_pre_hook(pre), m.register_forward_hook(post)]


def _range_backward(out: torch.Tensor, name: str) -> None:
    h: List[Any] = [None]

    def grad_arrives(grad: torch.Tensor) -> None:
        if _profiling():
            h[0] = _range_enter(name)

    def node_done(grad_inputs: Any, grad_outputs: Any) -> None:
        if h[0] is not None:
            _range_exit(h[0])
            h[0] = None

    out.register_hook(grad_arrives)
    out.grad_fn.register_hook(node_done)


def _frames() -> List[List[Any]]:
    """This thread's open module calls (light mode, nested): [start, region id or None]."""
    f = getattr(_tls, "frames", None)
    if f is None:
        f = _tls.frames = []
    return f


def _hook_module(m: torch.nn.Module, name: str, backward: bool, shapes: bool, nest: bool = False,
                 region: bool = False) -> List[Any]:
    """Light mode's forward (and backward) hooks of one module.

    With ``nest``, each call is a frame on this thread's stack: a call
    recorded inside another names the outer one's id as its ``parent``, the
    outer one taking an id (Client.region_id()) when its first child is
    recorded (children end, and are recorded, before their parent). A module
    with children (``region``) is category ``module``, not compute: its
    children's compute is theirs.
    """
    fwd, bwd = name + ".forward", name + ".backward"
    cat = "module" if region else None
    starts: List[int] = []

    def pre(mod: Any, inputs: Any) -> None:
        if nest:
            _frames().append([_now(), None])
        else:
            starts.append(_now())

    def post(mod: Any, inputs: Any, out: Any) -> None:
        end = _now()
        ident = parent = None
        if nest:
            frames = _frames()
            if not frames:
                return
            start, ident = frames.pop()
        elif not starts:
            return
        else:
            start = starts.pop()
        c = _client
        if c is None:
            return
        if nest and frames:
            if frames[-1][1] is None:
                frames[-1][1] = c.region_id()
            parent = frames[-1][1]
        o = out[0] if isinstance(out, (tuple, list)) and out else out
        out_shape = in_shapes = None
        if shapes:
            out_shape = _shape(o)
            in_shapes = [tuple(i.shape) for i in inputs if isinstance(i, torch.Tensor)]
        c.record(fwd, start, end - start, _nbytes(o), out_shape, in_shapes, _device, cat,
                 id=ident, parent=parent)
        if backward and isinstance(o, torch.Tensor) and o.grad_fn is not None:
            _hook_backward(o, bwd)

    return [m.register_forward_pre_hook(pre), m.register_forward_hook(post)]


def _hook_backward(out: torch.Tensor, name: str) -> None:
    t0 = [0]

    def grad_arrives(grad: torch.Tensor) -> None:
        t0[0] = _now()

    def node_done(grad_inputs: Any, grad_outputs: Any) -> None:
        c = _client
        if c is not None and t0[0]:
            c.record(name, t0[0], _now() - t0[0], 0, None, None, _device)

    out.register_hook(grad_arrives)
    out.grad_fn.register_hook(node_done)


def _wrap_optimizer(opt: torch.optim.Optimizer, profiler: bool = False) -> Callable[[], None]:
    orig = opt.step
    if profiler:
        _regions.add("optimizer.step")

    def step(*args: Any, **kwargs: Any) -> Any:
        if profiler:
            h = _range_enter("optimizer.step") if _profiling() else None
            try:
                return orig(*args, **kwargs)
            finally:
                if h is not None:
                    _range_exit(h)
        t0 = _now()
        r = orig(*args, **kwargs)
        c = _client
        if c is not None:
            c.record("optimizer.step", t0, _now() - t0, 0, None, None, _device)
        return r

    opt.step = step  # type: ignore[assignment]

    def undo() -> None:
        del opt.step
    return undo


# Communicators: one (comm id, size, sequence counter) per process group, None
# standing for the default group; size None when torch does not give it (a
# group this rank is not a member of).
_groups: Dict[Any, Tuple[int, Optional[int], Iterator[int]]] = {}


def _comm_name(group: Any) -> str:
    if group is None or group is dist.GroupMember.WORLD:
        return "world"
    from torch.distributed import distributed_c10d as c10d
    names = getattr(c10d, "_pg_names", {})
    ranks = dist.get_process_group_ranks(group) if hasattr(dist, "get_process_group_ranks") \
        else list(c10d._pg_group_ranks[group].keys())
    return "%s:%s" % (names.get(group, ""), ",".join(str(r) for r in ranks))


def _comm_size(group: Any) -> Optional[int]:
    try:
        n = dist.get_world_size(group)
    except (RuntimeError, ValueError):
        return None
    return n if n >= 1 else None  # -1: not a member


def _comm(group: Any) -> Tuple[int, Optional[int], Iterator[int]]:
    if group is dist.GroupMember.WORLD:
        group = None
    g = _groups.get(group)
    if g is None:
        g = _groups[group] = (tracectl.checksum(_comm_name(group).encode()), _comm_size(group),
                              itertools.count())
    return g


def comm_id(group: Any = None) -> int:
    """The ext ``comm`` the bridge sends with the collectives of a process group.

    It is the same on every member rank: FNV-1a 64 (tracectl.checksum) of
    ``"world"`` for the default group (None), else of ``"<name>:<ranks>"``,
    torch's name of the group (new_group() numbers groups in the order they
    are created, which every rank shares: two groups of the same ranks
    differ) and its global ranks in group-rank order, e.g. ``"1:0,1"``.
    """
    return _comm(group)[0]


DDP_LAUNCH = "allreduce_async"  # a bucket's allreduce issued (its arrival)
DDP_WAIT = "allreduce_wait"  # the time the rank waited for it to complete
_DDP_RANGE = "tracectl.ddp_allreduce"  # profiler mode: the launch, around c10d's operator


def instrument_ddp(ddp: torch.nn.parallel.DistributedDataParallel,
                   process_group: Any = None) -> None:
    """Records DDP's gradient allreduce, each bucket's one collective instance, and its wait.

    Registers a DDP communication hook that does what DDP does by default (an
    allreduce of the bucket, divided by the world size) and records, per
    bucket, two entries with the group's ``comm`` (comm_id()), ``seq`` (the
    group's count of collectives this rank issued before it, shared with
    instrument_distributed()'s calls) and ``comm_size`` in their ext map:

    - ``allreduce_async`` (category comm, the bucket's bytes and shape): the
      launch, the rank's arrival at the instance;
    - ``allreduce_wait`` (category wait): the part of DDP's wait for the
      buckets at the end of backward (the reducer's finalize, which waits for
      them in bucket order) that this bucket took: from the end of the
      previous bucket's wait (the start of finalize for the first) to its
      completion; 0 ns when it had completed before.

    The daemon takes the launch as a non-blocking arrival (the ``_async``
    suffix) and the wait as where the rank completed it, as it does an
    ``MPI_Iallreduce`` and its ``MPI_Wait``: a rank's wait at a bucket is the
    part of its allreduce_wait before the last rank launched it, so time a
    rank computed while a bucket was in flight is no wait. The start of
    finalize is taken with an autograd engine callback queued at the first
    bucket of each backward (it runs before DDP's, which DDP queues after its
    last bucket), the end of each bucket by its future's completion. It works
    in both modes: under torch.profiler, the launch is a profiler range that
    profiler_handler() sends c10d's operator in as category other, so that
    the bucket is one instance. DDP takes one comm hook: call it before the
    first backward, instead of another register_comm_hook.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    engine = getattr(torch.autograd.Variable, "_execution_engine", None)
    # this backward's buckets, [comm, seq, size, completion ns], once a callback is queued
    buckets: List[List[Any]] = []
    finalize = [0, False]  # the start of DDP's finalize; callbacks queued for this backward

    def waits() -> None:  # after DDP's finalize: every bucket completed, in bucket order
        c = _client
        t = finalize[0]
        for comm, seq, size, done_ns in buckets:
            end = max(t, done_ns)
            if c is not None:
                c.record(DDP_WAIT, t, end - t, 0, None, None, None, "wait", comm=comm, seq=seq,
                         comm_size=size)
            t = end
        buckets.clear()
        finalize[1] = False

    def before_finalize() -> None:
        finalize[0] = _now()
        engine.queue_callback(waits)  # after DDP's finalize, which was queued before this ran

    def hook(state, bucket):  # no annotations: DDP checks them against its own types
        buf = bucket.buffer()
        comm, size, counter = _comm(state)
        seq = next(counter)
        if not finalize[1] and engine is not None:  # the first bucket of this backward
            buckets.clear()
            try:
                engine.queue_callback(before_finalize)
                finalize[1] = True
            except RuntimeError:
                pass  # not in a backward pass: each bucket's wait ends at its completion
        rec = [comm, seq, size, 0]
        deferred = finalize[1]
        if deferred:
            buckets.append(rec)
        h = _range_enter(_DDP_RANGE) if _profiling() else None
        t0 = _now()
        _tls.inside = True
        try:
            fut = default_hooks.allreduce_hook(state, bucket)
        finally:
            _tls.inside = False
            t1 = _now()
            if h is not None:
                _range_exit(h)
        c = _client
        if c is not None:
            c.record(DDP_LAUNCH, t0, t1 - t0, buf.numel() * buf.element_size(), tuple(buf.shape),
                     None, None, "comm", comm=comm, seq=seq, comm_size=size)

        def done(f: torch.futures.Future) -> Any:
            rec[3] = _now()
            c2 = _client
            if not deferred and c2 is not None:
                c2.record(DDP_WAIT, t1, rec[3] - t1, 0, None, None, None, "wait", comm=comm,
                          seq=seq, comm_size=size)
            return f.value()
        return fut.then(done)

    def forward(mod: Any, inputs: Any) -> None:
        # a backward that ended without DDP's finalize (an exception) ran no callback: its
        # buckets record no wait; the next backward queues its own
        buckets.clear()
        finalize[1] = False

    ddp.register_comm_hook(process_group, hook)
    ddp.register_forward_pre_hook(forward)


COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "all_gather_object", "reduce_scatter",
               "reduce", "gather", "scatter", "all_to_all", "all_to_all_single", "barrier",
               "send", "recv", "isend", "irecv", "broadcast_object_list")
P2P = {"send": "dst", "isend": "dst", "recv": "src", "irecv": "src"}  # → the peer's argument
_originals: Dict[str, Callable[..., Any]] = {}


def instrument_distributed(names: Iterable[str] = COLLECTIVES) -> None:
    """Wraps torch.distributed's collectives so that each call records an entry (category comm).

    A blocking call is recorded from call to return; an asynchronous one
    (async_op=True, isend, irecv) from call to the completion of its future
    when the backend gives one, else to the return of the call. The entry's
    bytes are those of its tensors. Its ext map carries the group's ``comm``
    (comm_id()) and, for a collective, ``seq``: how many collectives this
    rank issued on that group before it (the wrapped calls and
    instrument_ddp()'s buckets), which torch makes the same on every member,
    and ``comm_size``: the group's number of ranks
    (torch.distributed.get_world_size(group)), so that the daemon counts an
    instance of a subgroup complete once its members arrived; a
    point-to-point call carries its ``peer`` instead (no seq). A call on a
    group this rank is not a member of does nothing in torch and records
    nothing. Idempotent; ``uninstrument_distributed()`` restores the
    originals.
    """
    for n in names:
        f = getattr(dist, n, None)
        if f is None or n in _originals:
            continue
        _originals[n] = f
        setattr(dist, n, _wrap_collective(n, f))


def uninstrument_distributed() -> None:
    """Restores what instrument_distributed() wrapped."""
    for n, f in _originals.items():
        setattr(dist, n, f)
    _originals.clear()


def _wrap_collective(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
    is_async = name in ("isend", "irecv")
    peer_arg = P2P.get(name)
    try:
        params = list(inspect.signature(f).parameters)
    except (TypeError, ValueError):
        params = []

    def at(key: Optional[str]) -> int:
        return params.index(key) if key in params else -1
    gi, ai, pi = at("group"), at("async_op"), at(peer_arg)
    non_member = getattr(dist.GroupMember, "NON_GROUP_MEMBER", object())

    def arg(args: Sequence[Any], kwargs: Dict[str, Any], i: int, key: Optional[str]) -> Any:
        if key in kwargs:
            return kwargs[key]
        return args[i] if 0 <= i < len(args) else None

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if getattr(_tls, "inside", False):
            return f(*args, **kwargs)
        group = arg(args, kwargs, gi, "group")
        if group is non_member:
            return f(*args, **kwargs)
        comm, size, counter = _comm(group)
        if peer_arg is None:
            ext = {"comm": comm, "seq": next(counter), "comm_size": size}
        else:
            peer = arg(args, kwargs, pi, peer_arg)
            ext = {"comm": comm} if peer is None else {"comm": comm, "peer": int(peer)}
        c = _client
        if c is None:
            return f(*args, **kwargs)
        nbytes = _nbytes(args[0]) if args else _nbytes(kwargs.get("tensor"))
        t0 = _now()
        _tls.inside = True
        try:
            work = f(*args, **kwargs)
        finally:
            _tls.inside = False
        if (is_async or arg(args, kwargs, ai, "async_op")) and work is not None:
            try:
                def done(fut: Any) -> Any:
                    c.record(name, t0, _now() - t0, nbytes, None, None, None, "comm", **ext)
                    return fut.value()
                work.get_future().then(done)
                return work
            except (RuntimeError, AttributeError):
                pass  # this backend gives no future for it: record the call itself
        c.record(name, t0, _now() - t0, nbytes, None, None, None, "comm", **ext)
        return work

    wrapped.__wrapped__ = f  # type: ignore[attr-defined]
    wrapped.__name__ = getattr(f, "__name__", name)
    wrapped.__doc__ = f.__doc__
    return wrapped


# The one list of communication words, all of them (the daemon's rule): proto/proto_class.h,
# PROTO_COMM_WORDS and PROTO_COMM_PREFIX, in its order; tests/python/test_comm_words.py
# checks this copy against the header word for word.
COMM_WORDS = ("allreduce", "all_reduce", "all_gather", "allgather", "reduce_scatter",
              "reducescatter", "alltoall", "all_to_all", "broadcast", "send", "recv",
              "sendrecv", "barrier", "nccl", "comm", "record_param_comms",
              "cross_device_reduce", "ep::internode::", "ep::intranode::", "deep_ep", "gloo",
              "c10d", "rccl", "msccl", "nvshmem")
COMM_PREFIX = "mpi_"


def _category(name: str) -> str:
    """comm or compute by name: the one list (COMM_WORDS, COMM_PREFIX), but an aten::
    operator is never a collective (aten::broadcast_tensors broadcasts shapes)."""
    n = name.lower()
    if n.startswith("aten::"):
        return "compute"
    return "comm" if n.startswith(COMM_PREFIX) or any(w in n for w in COMM_WORDS) else "compute"


# The backends' records of a collective: ProcessGroupGloo/NCCL/UCC/MPI record each one they run
# (gloo:all_reduce), inside or after c10d's operator of it (c10d::allreduce_).
_BACKENDS = ("gloo:", "nccl:", "ucc:", "mpi:")
_c10d_seen: Set[str] = set()  # profiler mode: the collectives c10d:: operators were seen for


def _family(name: str) -> str:
    """A collective's name without its layer's prefix and underscores: c10d::allreduce_ and
    gloo:all_reduce are both "allreduce"."""
    return name.lower().rsplit(":", 1)[-1].replace("_", "")


def _prof_category(name: str) -> str:
    """Profiler mode's category: _category(), but the backend's record of a collective c10d
    recorded too is "other", so that one collective is one instance (the daemon matches
    every comm operator of a rank as a collective of its own). Its self time is the backend
    thread's bookkeeping (0 for gloo), not communication: the caller's is in c10d's."""
    if name.lower().startswith(_BACKENDS) and _family(name) in _c10d_seen:
        return "other"
    return _category(name)


def profiler_handler(then: Optional[Callable[[Any], None]] = None, *,
                     self_time: bool = True, links: bool = True) -> Callable[[Any], None]:
    """Profiler mode: an ``on_trace_ready`` handler that streams each cycle's operators.

    Use it as ``torch.profiler.profile(..., on_trace_ready=tct.profiler_handler())``.
    At each cycle, every operator event of the profiler is recorded with its
    shapes (``record_shapes=True``), its memory (``profile_memory=True``), the
    current step, and category comm for c10d/gloo/nccl operators and the
    other communication words (COMM_WORDS; compute otherwise; a backend's
    record of a collective c10d:: recorded too, such as gloo:all_reduce beside
    c10d::allreduce_, is other, so that one collective is one instance); with
    ``self_time`` its duration is its self CPU time (children excluded, as
    ``tracectl import`` does) and its whole span goes beside it (ext ``span``:
    what ``tracectl export --format chrome|perfetto`` draw, stretched over the
    ops that start in it and end at most 2 µs after it, which the profiler's
    rounding to whole µs left there), else its duration is its whole span; each
    carries its thread as its ext ``stream``, a track of its own in those
    exports. ``then`` is
    called after, e.g. ``torch.profiler.tensorboard_trace_handler(dir)``.
    Call ``tct.step()`` right after ``prof.step()``: each of the cycle's
    profiler steps is then recorded as its training step.

    With ``instrument(model, profiler=True)``, the module ranges are sent as
    regions (category ``module``, their whole span, an ext ``id``) and, with
    ``links``, each event with the id of the innermost module range around it
    on its thread as its ``parent`` (by the profiler's times: a range
    encloses an event that starts and ends within it; at equal times the
    range is the outer one).
    """
    def handler(prof: Any) -> None:
        c = _client
        if c is not None:
            _stream_events(c, prof, self_time, links)
        if then is not None:
            then(prof)
    return handler


def _link(c: tracectl.Client, events: Sequence[Any]) -> Tuple[Dict[int, int], Dict[int, int]]:
    """(ids, parents) by index into events: a new id for each module range, and for each
    event inside one the id of the innermost one around it on its thread."""
    ids: Dict[int, int] = {}
    parents: Dict[int, int] = {}
    key = [(e.thread, e.time_range.start, -e.time_range.end, e.name not in _regions, i)
           for i, e in enumerate(events)]
    key.sort()
    stack: List[Tuple[int, int, int]] = []  # open ranges of the thread: (start, end, id)
    thread = None
    for th, start, nend, plain, i in key:
        end = -nend
        if th != thread:
            stack, thread = [], th
        while stack and stack[-1][1] < start:
            stack.pop()
        for s0, e0, rid in reversed(stack):  # ranges that cross another one are skipped
            if s0 <= start and end <= e0:
                parents[i] = rid
                break
        if not plain:
            rid = ids[i] = c.region_id()
            stack.append((start, end, rid))
    return ids, parents


# The profiler keeps an operator's start and duration in whole µs, each cut apart, so an op's
# end can land up to 2 µs past the end of the op that called it.
_ROUNDING_NS = 2000


def _drawn_ends(events: Sequence[Any]) -> Dict[int, int]:
    """The end (ns after the trace's start) each event is drawn to, by index: its own, or
    the last of those that start inside it on its thread and end at most _ROUNDING_NS after
    it (its children, as the profiler's rounding left them), so that it covers them."""
    ends = {i: int(round(e.time_range.end * 1000)) for i, e in enumerate(events)}
    key = sorted((e.thread, e.time_range.start, -e.time_range.end, i)
                 for i, e in enumerate(events))
    stack: List[int] = []
    thread = None

    def close() -> None:
        j = stack.pop()
        if stack and ends[j] > ends[stack[-1]]:
            ends[stack[-1]] = ends[j]

    for th, start, _, i in key:
        if th != thread:
            while stack:
                close()
            thread = th
        s_ns = int(round(start * 1000))
        while stack and (s_ns >= ends[stack[-1]] or
                         ends[i] > ends[stack[-1]] + _ROUNDING_NS):
            close()
        stack.append(i)
    while stack:
        close()
    return ends


def _stream_events(c: tracectl.Client, prof: Any, self_time: bool, links: bool = True) -> int:
    """Records prof's CPU operator events; returns how many."""
    # Event times are µs after the trace's start, which is µs since the epoch:
    # move them onto CLOCK_MONOTONIC through the current offset of the two clocks.
    kr = getattr(prof.profiler, "kineto_results", None)
    start_us = kr.trace_start_us() if kr is not None else 0
    offset_ns = time.monotonic_ns() - time.time_ns()
    events = [e for e in prof.events() if str(getattr(e, "device_type", "DeviceType.CPU"))
              == "DeviceType.CPU" and not e.name.startswith("[memory]")
              and not e.name.startswith("ProfilerStep")]
    # instrument_ddp()'s launches: the bucket's instance is the hook's allreduce_async, and
    # c10d's operator inside one is the same collective (sent as other); the ranges are not sent
    launches: Dict[Any, List[Tuple[float, float]]] = {}
    for e in events:
        if e.name == _DDP_RANGE:
            launches.setdefault(e.thread, []).append((e.time_range.start, e.time_range.end))
    if launches:
        events = [e for e in events if e.name != _DDP_RANGE]
    # The profiler's ProfilerStep spans (its numbers are not reliable in 1.13)
    # mark where each step of the cycle began: the cycle's last span is the
    # step the bridge is on (tct.step() is called after prof.step()), the ones
    # before it the steps before.
    starts = sorted(k.start_us() - start_us for k in (kr.events() if kr is not None else [])
                    if k.name().startswith("ProfilerStep#"))
    first = _step - len(starts) + 1
    ids: Dict[int, int] = {}
    parents: Dict[int, int] = {}
    if _regions:
        if links:
            ids, parents = _link(c, events)
        else:
            ids = {i: c.region_id() for i, e in enumerate(events) if e.name in _regions}
    _c10d_seen.update(_family(e.name) for e in events if e.name.startswith("c10d::"))
    ends = _drawn_ends(events)
    n, cur = 0, None
    for i, e in enumerate(events):
        s = max(first + max(bisect.bisect_right(starts, e.time_range.start) - 1, 0), 0)
        if s != cur:
            c.set_step(s)
            cur = s
        # In integers: µs since the epoch times 1000 is past a double's 53 bits, where a
        # child's end could round past its parent's. Both ends rounded alike keep it inside.
        s_ns = int(round(e.time_range.start * 1000))
        t0 = int(start_us) * 1000 + s_ns + offset_ns
        rid = ids.get(i)
        whole = max(int(round(e.time_range.end * 1000)) - s_ns, 0)
        if rid is not None:
            dur, cat = whole, "module"
        else:
            dur = max(int((e.self_cpu_time_total if self_time else e.cpu_time_total) * 1000), 0)
            cat = _prof_category(e.name)
            if cat == "comm" and any(b <= e.time_range.start and e.time_range.end <= f
                                     for b, f in launches.get(e.thread, ())):
                cat = "other"
        whole = max(ends[i] - s_ns, whole)  # covering its children, as drawn
        shapes = [tuple(x) for x in (e.input_shapes or []) if x][:8]
        # A self time comes with the whole interval (ext span), and each event with its
        # thread (ext stream): timelines draw each thread's events nested on a track.
        th = getattr(e, "thread", None)
        c.record(e.name, max(t0, 0), dur, max(int(e.cpu_memory_usage or 0), 0), None,
                 shapes or None, _device if cat != "comm" else None, cat,
                 stream=th if isinstance(th, int) and th >= 0 else None,
                 id=rid, parent=parents.get(i), span=whole if whole > dur else None)
        n += 1
    c.set_step(_step)
    return n
