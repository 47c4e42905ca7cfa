"""tracectl: stream trace entries from a Python program to tracectld.

A thin binding of libtracectl (the C library) through a CPython extension:
recording an op costs the Python call and a store into a per-thread ring; a
background thread of the library ships batches to the daemon. Recording never
blocks the program (unless ``blocking=True``): when the daemon is slow or gone,
entries are dropped *and counted* (``Client.dropped``).

    import tracectl

    tc = tracectl.open(session="train", rank=0, world=4, device="cpu:0")
    with tc.op("matmul", out_shape=(64, 64), in_shapes=[(64, 128), (128, 64)], mem=16384):
        ...                                   # one entry spanning the block
    @tc.trace                                 # one entry per call, named after the function
    def forward(x): ...
    tc.step()                                 # the next training step
    st = tc.close()                           # flush, bye, free; never raises by default
    # st: {"ok", "error", "recorded", "dropped", "stored", "unconfirmed"}

Regions nest: each ``with`` block records its own span (the outer one is not
cut), and a block inside another of the same client on the same thread is sent
with the outer one's id as its parent, so that ``tracectl export --format
collapsed`` (and the Chrome and Perfetto exports) show the real stack. Times are on ``time.monotonic_ns()``'s clock (CLOCK_MONOTONIC, the clock
the C library uses). When no daemon answers, ``open()`` returns an offline
client that records nothing and counts every entry as dropped; in blocking
mode it raises ``tracectl.Error`` instead.

The environment gives what the arguments leave out, as for the C library:
TRACECTL_SOCKET, TRACECTL_SESSION (else SLURM_JOB_ID, else
TORCHELASTIC_RUN_ID, else "default"), RANK / WORLD_SIZE (and the MPI and
Slurm equivalents), TRACECTL_DEVICE, TRACECTL_DISABLE=1, TRACECTL_BLOCKING=1.

After ``os.fork()`` the child follows the C library's fork rule (tracectl.h):
it records as a new process of the same session; the parent's connection is
left intact.

Divergence checks (``tracectl diff A B --divergence``): give an entry the
checksum of its output, ``tracectl.checksum(buffer)`` (FNV-1a 64 over the
bytes of any contiguous buffer: bytes, memoryview, a numpy array), either as
``record(..., checksum=h)`` or inside a region::

    with tc.op("matmul") as r:
        out = a @ b
        r.checksum = tracectl.checksum(out.numpy())

The tool never fails the job: ``close()`` and ``flush()`` return a status
dict instead of raising when the daemon is stopped, killed or could not
store everything — ``ok`` (no error), ``error`` (None or the
``tracectl.Error``), ``recorded``, ``dropped`` (never sent, or sent and lost
with the connection, as the C library counts), ``stored`` (what the daemon
acknowledged as stored, at this call or the last flush that was
acknowledged) and ``unconfirmed`` (recorded - dropped - stored: sent or
queued, neither acknowledged nor known lost; the daemon may have stored
some). ``strict=True`` raises the
error instead (its ``status`` attribute holds the dict). ``flush()`` waits
at most ``timeout`` seconds (None: ``$TRACECTL_CLOSE_TIMEOUT``, else 5; a
negative timeout waits for the ack however long). ``close()`` waits as long
as the C library's ``tc_close()`` does (tracectl.h). A ``with`` block's end
closes without raising, as does a client freed unclosed.

Bad arguments raise at the call (ValueError, TypeError, OverflowError), with
a message that names the limit and quotes at most 40 characters of the
value, because the daemon ends a connection at the first message it must
refuse and everything after it is lost: op names and meta keys 1..1024
bytes of UTF-8 and meta strings at most 1024, categories 1..32, device names
at most 1024, session names 1..256 (one from the environment too;
proto/PROTOCOL.md, Limits), none with a NUL; ``0 <= rank < world <= 2**31-1``; an integer op id given to
``record()`` must be one ``op_id()`` returned on this client; ``meta()``
takes at most 1,024 distinct keys per process (the daemon's limit).

``tracectl.torch`` instruments PyTorch models and torch.distributed.
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any, Callable, Optional, Sequence, TypeVar, Union, overload

try:
    from ._tracectl import Client as _CClient
    from ._tracectl import Error, Region, checksum, now_ns
    from ._tracectl import open as _c_open
except ImportError as _e:  # a build tree or copy without the C extension (or a broken one)
    raise ImportError(
        f"tracectl: cannot load its C extension tracectl._tracectl from {__path__[0]} ({_e}); "
        "build it with `cmake --build build --target tracectl_python` (or `bash scripts/demo.sh`) "
        "and use PYTHONPATH=build/python, or install it with `cmake --install build`",
        name=__name__,
    ) from _e

__all__ = ["Client", "Error", "OfflineWarning", "Region", "checksum", "current", "now_ns", "open",
           "trace"]

F = TypeVar("F", bound=Callable[..., Any])
Shape = Sequence[int]

_current: Optional["Client"] = None


class OfflineWarning(RuntimeWarning):
    """Warned by ``open()`` when no daemon answered: the process is not recorded."""


class Client(_CClient):
    """A connection to tracectld; see ``tracectl.open()``.

    Methods (from the C extension): ``op(name, out_shape=None, in_shapes=None,
    mem=0, category=None)`` returns a region for ``with``; ``record(op,
    start_ns, dur_ns, mem=0, out_shape=None, in_shapes=None, device=None,
    category=None, checksum=None, *, stream=None, peer=None, comm=None,
    seq=None, id=None, parent=None, comm_size=None, span=None)`` records a
    complete entry, the keywords after ``*`` going in its ext map
    (proto/PROTOCOL.md Part 3: a collective's communicator, sequence number and
    communicator size, a point-to-point peer, the links of nested entries, the
    whole interval of an entry whose dur_ns is its self time); ``region_id()`` hands out a new entry id for ``id=`` and
    the ``parent=`` of the entries inside it; ``op_id(name, category=None)``
    interns a name; ``step()``, ``set_step(n)``, ``meta(key, value)``,
    ``flush(timeout=None, strict=False)``, ``close(strict=False)`` (both
    return a status dict: see the module's docstring). Properties: ``dropped``,
    ``recorded``, ``session_id``, ``enabled``, ``closed``, ``open_error``,
    ``error_message`` (why an offline client sends nothing; "" otherwise).
    A client is also a context manager that closes it.
    """

    __slots__ = ()

    def trace(self, fn_or_name: Union[F, str, None] = None, *,
              category: Optional[str] = None) -> Any:
        """Decorator: each call of the function records one entry.

        ``@tc.trace`` names the entry after the function's qualified name;
        ``@tc.trace("name")`` or ``@tc.trace(category="comm")`` name it
        explicitly or give its category.
        """
        return _decorator(lambda: self, fn_or_name, category)


def open(session: Optional[str] = None, rank: Optional[int] = None,
         world: Optional[int] = None, device: Optional[str] = None,
         blocking: Optional[bool] = None, *, socket: Optional[str] = None,
         ring_entries: int = 0) -> Client:
    """Connects to tracectld, says hello and returns a Client.

    Arguments left as None come from the environment (see the module's
    docstring); ``blocking`` None is ``$TRACECTL_BLOCKING``, else False.
    ``ring_entries`` is each recording thread's ring size (a power of two;
    0: 65536, 2 MiB).

    Without a daemon (or when it refuses the hello) the client is offline:
    ``enabled`` is False, ``open_error`` holds the errno, and every entry
    is counted in ``dropped``; ``open()`` then warns once with an
    ``OfflineWarning`` saying why, so that a job that is not recorded does
    not run silently (``TRACECTL_QUIET=1``, or a ``warnings`` filter,
    silences it; ``TRACECTL_DISABLE=1`` is no error: no warning). In
    blocking mode that raises ``Error`` instead. The client becomes
    ``tracectl.current()``, which ``tracectl.trace`` uses.
    """
    global _current
    c = _c_open(session=session, rank=rank, world=world, device=device,
                blocking=blocking, socket=socket, ring_entries=ring_entries,
                type=Client)
    if c.open_error != 0 and os.environ.get("TRACECTL_QUIET") != "1":
        warnings.warn("tracectl: this process is not recorded: "
                      f"{c.error_message or os.strerror(c.open_error)} "
                      "(TRACECTL_QUIET=1 silences this)", OfflineWarning, stacklevel=2)
    _current = c
    return c


def current() -> Optional[Client]:
    """The client last opened with ``tracectl.open()``, None once it is closed."""
    c = _current
    return c if c is not None and not c.closed else None


@overload
def trace(fn_or_name: F) -> F: ...
@overload
def trace(fn_or_name: Optional[str] = None, *,
          category: Optional[str] = None) -> Callable[[F], F]: ...


def trace(fn_or_name: Any = None, *, category: Optional[str] = None) -> Any:
    """Decorator recording each call on ``tracectl.current()`` (if one is open).

    ``@tracectl.trace`` names the entry after the function,
    ``@tracectl.trace("name")`` explicitly. The client is looked up at each
    call, so functions can be decorated before ``open()``.
    """
    return _decorator(current, fn_or_name, category)


def _decorator(get: Callable[[], Optional[Client]], fn_or_name: Any,
               category: Optional[str]) -> Any:
    def wrap(fn: F, name: str) -> F:
        @functools.wraps(fn)
        def traced(*args: Any, **kwargs: Any) -> Any:
            c = get()
            if c is None:
                return fn(*args, **kwargs)
            with c.op(name, category=category):
                return fn(*args, **kwargs)
        return traced  # type: ignore[return-value]

    if callable(fn_or_name):
        return wrap(fn_or_name, fn_or_name.__qualname__)
    return lambda fn: wrap(fn, fn_or_name or fn.__qualname__)
