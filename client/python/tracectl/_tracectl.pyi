"""Type hints of the C extension (see tracectl/__init__.py for the documentation)."""
from types import TracebackType
from typing import Optional, Sequence, Type, TypeVar, TypedDict, Union

_C = TypeVar("_C", bound="Client")
Shape = Sequence[int]

class Error(OSError):
    """A libtracectl or daemon error: errno, strerror, code (the errno's name), message."""
    code: Optional[str]
    message: str
    status: "Status"  # set when raised by flush(strict=True) or close(strict=True)

class Status(TypedDict):
    """What flush() and close() return (see Client.close in tracectl/__init__.py)."""
    ok: bool
    error: Optional[Error]
    recorded: int
    dropped: int
    stored: int
    unconfirmed: int

class Region:
    """One op's span: ``with client.op(name): ...`` records it when the block ends."""
    checksum: Optional[int]
    def __enter__(self) -> "Region": ...
    def __exit__(self, t: Optional[Type[BaseException]], v: Optional[BaseException],
                 tb: Optional[TracebackType]) -> bool: ...

class Client:
    dropped: int
    recorded: int
    session_id: int
    enabled: bool
    closed: bool
    open_error: int
    error_message: str
    def op(self, name: str, out_shape: Optional[Shape] = ..., in_shapes: Optional[Sequence[Shape]] = ...,
           mem: int = ..., category: Optional[str] = ...) -> Region: ...
    def op_id(self, name: str, category: Optional[str] = ...) -> int: ...
    def record(self, op: Union[str, int], start_ns: int, dur_ns: int, mem: int = ...,
               out_shape: Optional[Shape] = ..., in_shapes: Optional[Sequence[Shape]] = ...,
               device: Optional[str] = ..., category: Optional[str] = ...,
               checksum: Optional[int] = ..., *, stream: Optional[int] = ...,
               peer: Optional[int] = ..., comm: Optional[int] = ..., seq: Optional[int] = ...,
               id: Optional[int] = ..., parent: Optional[int] = ...,
               comm_size: Optional[int] = ..., span: Optional[int] = ...) -> None: ...
    def region_id(self) -> int: ...
    def step(self) -> None: ...
    def set_step(self, step: int) -> None: ...
    def cpu_wait(self) -> None: ...
    def meta(self, key: str, value: Union[str, int, float, bool]) -> None: ...
    def flush(self, timeout: Optional[float] = ..., strict: bool = ...) -> Status: ...
    def close(self, strict: bool = ...) -> Status: ...
    def __enter__(self: _C) -> _C: ...
    def __exit__(self, t: Optional[Type[BaseException]], v: Optional[BaseException],
                 tb: Optional[TracebackType]) -> bool: ...

def open(session: Optional[str] = ..., rank: Optional[int] = ..., world: Optional[int] = ...,
         device: Optional[str] = ..., blocking: Optional[bool] = ..., socket: Optional[str] = ...,
         ring_entries: int = ..., type: Type[_C] = ...) -> _C: ...
def now_ns() -> int: ...
def checksum(data: object, start: Optional[int] = ...) -> int: ...
