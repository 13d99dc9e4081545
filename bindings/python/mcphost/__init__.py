"""mcphost: the host side of the Model Context Protocol, from Python.

A ctypes binding over libmcphost (``include/mcphost.h``). Open an engine in
this process with :func:`open_embedded` (or :func:`open_embedded_async`), or
reach a running ``mcphost daemon`` with :func:`connect` (or
:func:`connect_async`); both give the same methods: MCP plus ``mcphost/*``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

from . import _lib, methods
from ._lib import ABI_VERSION, LIBRARY_ENV
from .aio import AsyncClient, PendingRequest
from .client import Client
from .errors import (
    AbiMismatchError,
    AlreadyAnsweredError,
    CancelledError,
    ClosedError,
    ConfigError,
    ConnectError,
    InvalidHandleError,
    InvalidJsonError,
    InvalidRequestError,
    InvalidUtf8Error,
    LibraryError,
    LibraryNotFoundError,
    McphostError,
    NotRunningError,
    NotWaitingError,
    NullArgumentError,
    OnCallbackThreadError,
    PanicError,
    RpcError,
    RuntimeStartError,
    TimeoutError,
    UnsupportedError,
    VersionMismatchError,
)

__version__ = "0.1.0"

__all__ = [
    "ABI_VERSION",
    "LIBRARY_ENV",
    "AbiMismatchError",
    "AlreadyAnsweredError",
    "AsyncClient",
    "CancelledError",
    "Client",
    "ClosedError",
    "ConfigError",
    "ConnectError",
    "InvalidHandleError",
    "InvalidJsonError",
    "InvalidRequestError",
    "InvalidUtf8Error",
    "LibraryError",
    "LibraryNotFoundError",
    "McphostError",
    "NotRunningError",
    "NotWaitingError",
    "NullArgumentError",
    "OnCallbackThreadError",
    "PanicError",
    "PendingRequest",
    "RpcError",
    "RuntimeStartError",
    "TimeoutError",
    "UnsupportedError",
    "VersionMismatchError",
    "abi_version",
    "connect",
    "connect_async",
    "library_path",
    "library_version",
    "methods",
    "open_embedded",
    "open_embedded_async",
]

HostCallable = Callable[[dict[str, Any]], Any]
EventCallable = Callable[[dict[str, Any]], Any]


def abi_version() -> int:
    """``mcphost_abi_version()`` of the loaded library."""
    return int(_lib.lib().mcphost_abi_version())


def library_version() -> str:
    """The loaded library's release (``mcphost_version()``)."""
    return _lib.lib().mcphost_version().decode()


def library_path() -> Path:
    """The path of the loaded library."""
    return _lib.library_path()


def _config(config: Any) -> str:
    from ._core import config_text

    return config_text(config)


def open_embedded(
    config: dict[str, Any] | str,
    *,
    sampling: HostCallable | None = None,
    elicitation: HostCallable | None = None,
    elicitation_modes: Iterable[str] = ("form",),
    roots: HostCallable | None = None,
    on_event: EventCallable | None = None,
    client_name: str | None = None,
    request_timeout: float | None = None,
    wait_ready: float | None = None,
) -> Client:
    """Run an engine in this process over ``config`` (a dict, or the config
    file's JSON/JSONC text: ``{"servers": {...}}``).

    Host callbacks (``sampling``, ``elicitation``, ``roots``) are callables,
    sync or async, called with ``{"id", "server", "method", "params"}`` and
    returning the result dict; registering one declares its capability.
    Raising :class:`RpcError` answers the server with that error; any other
    exception answers -32603. ``on_event`` gets every event (then
    :meth:`Client.next_event` is unavailable). Times are in seconds:
    ``request_timeout`` for every request (default 600), ``wait_ready`` to
    wait for the servers before returning (default: no wait).
    """
    from .client import _open

    return _open(
        "embedded",
        _config(config),
        sampling=sampling,
        elicitation=elicitation,
        elicitation_modes=elicitation_modes,
        roots=roots,
        on_event=on_event,
        client_name=client_name,
        request_timeout=request_timeout,
        wait_ready=wait_ready,
    )


def connect(
    socket_path: str | Path | None = None,
    *,
    sampling: HostCallable | None = None,
    elicitation: HostCallable | None = None,
    elicitation_modes: Iterable[str] = ("form",),
    roots: HostCallable | None = None,
    on_event: EventCallable | None = None,
    client_name: str | None = None,
    request_timeout: float | None = None,
    wait_ready: float | None = None,
) -> Client:
    """Connect to a running ``mcphost daemon`` at ``socket_path`` (None:
    ``$MCPHOST_SOCKET``, else the daemon's default path). Raises
    :class:`NotRunningError` when none listens, :class:`VersionMismatchError`
    when it is another release. Other arguments as :func:`open_embedded`
    (``wait_ready`` applies to embedded engines only)."""
    from .client import _open

    return _open(
        "connected",
        None if socket_path is None else str(socket_path),
        sampling=sampling,
        elicitation=elicitation,
        elicitation_modes=elicitation_modes,
        roots=roots,
        on_event=on_event,
        client_name=client_name,
        request_timeout=request_timeout,
        wait_ready=wait_ready,
    )


async def open_embedded_async(
    config: dict[str, Any] | str,
    *,
    sampling: HostCallable | None = None,
    elicitation: HostCallable | None = None,
    elicitation_modes: Iterable[str] = ("form",),
    roots: HostCallable | None = None,
    on_event: EventCallable | None = None,
    client_name: str | None = None,
    request_timeout: float | None = None,
    wait_ready: float | None = None,
) -> AsyncClient:
    """As :func:`open_embedded`, for asyncio: async callbacks run on this
    loop, and so does ``on_event``."""
    from .aio import open_async

    return await open_async(
        "embedded",
        _config(config),
        sampling=sampling,
        elicitation=elicitation,
        elicitation_modes=elicitation_modes,
        roots=roots,
        on_event=on_event,
        client_name=client_name,
        request_timeout=request_timeout,
        wait_ready=wait_ready,
    )


async def connect_async(
    socket_path: str | Path | None = None,
    *,
    sampling: HostCallable | None = None,
    elicitation: HostCallable | None = None,
    elicitation_modes: Iterable[str] = ("form",),
    roots: HostCallable | None = None,
    on_event: EventCallable | None = None,
    client_name: str | None = None,
    request_timeout: float | None = None,
    wait_ready: float | None = None,
) -> AsyncClient:
    """As :func:`connect`, for asyncio."""
    from .aio import open_async

    return await open_async(
        "connected",
        None if socket_path is None else str(socket_path),
        sampling=sampling,
        elicitation=elicitation,
        elicitation_modes=elicitation_modes,
        roots=roots,
        on_event=on_event,
        client_name=client_name,
        request_timeout=request_timeout,
        wait_ready=wait_ready,
    )
