"""Exceptions: one class per status code of ``include/mcphost.h``.

Every error the library reports is a :class:`McphostError` with ``.status``
(the number), ``.status_name`` (``"MCPHOST_ERR_TIMEOUT"``) and ``.message``
(the library's ``error`` out parameter). :func:`error_for_status` builds the
right subclass. Some also derive from the builtin that fits, so
``except TimeoutError`` (the builtin) catches :class:`TimeoutError`.
"""

from __future__ import annotations

import builtins
from typing import Any


class McphostError(Exception):
    """An error reported by libmcphost (or by this package about it)."""

    #: The status code this class stands for (None: not a library status).
    STATUS: int | None = None

    def __init__(self, message: str = "", *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = self.STATUS if status is None else status

    @property
    def status_name(self) -> str | None:
        if self.status is None:
            return None
        return STATUS_NAMES.get(self.status, "MCPHOST_ERR_UNKNOWN")

    def __str__(self) -> str:
        return self.message


class LibraryError(McphostError):
    """The library could not be used: not found, or not this package's ABI."""


class LibraryNotFoundError(LibraryError):
    """libmcphost was not found (neither ``$MCPHOST_LIBRARY`` nor the bundled copy)."""


class AbiMismatchError(LibraryError):
    """The library's ``mcphost_abi_version()`` is not the one this package speaks."""

    def __init__(
        self,
        message: str,
        *,
        path: Any = None,
        found: int | None = None,
        expected: int | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.found = found
        self.expected = expected


class NullArgumentError(McphostError, ValueError):
    """MCPHOST_ERR_NULL_ARGUMENT: a required argument was missing."""

    STATUS = 1


class InvalidUtf8Error(McphostError, ValueError):
    """MCPHOST_ERR_INVALID_UTF8."""

    STATUS = 2


class InvalidJsonError(McphostError, ValueError):
    """MCPHOST_ERR_INVALID_JSON: a JSON argument did not parse."""

    STATUS = 3


class InvalidRequestError(McphostError, ValueError):
    """MCPHOST_ERR_INVALID_REQUEST: JSON that is not what the call takes."""

    STATUS = 4


class ConfigError(McphostError, ValueError):
    """MCPHOST_ERR_CONFIG: the embedded config was refused; the message names the field."""

    STATUS = 5


class ConnectError(McphostError, ConnectionError):
    """MCPHOST_ERR_CONNECT: the daemon could not be reached or did not complete the handshake."""

    STATUS = 7


class NotRunningError(ConnectError):
    """MCPHOST_ERR_NOT_RUNNING: no daemon listens on the socket (``mcphost daemon`` starts one)."""

    STATUS = 6


class VersionMismatchError(McphostError):
    """MCPHOST_ERR_VERSION_MISMATCH: the daemon runs another release (the message says how to fix it)."""

    STATUS = 8


class RpcError(McphostError):
    """MCPHOST_ERR_RPC: a JSON-RPC error response.

    Raised by requests; raise it from a host callback to answer the server
    with this ``code``, ``message`` and ``data``.
    """

    STATUS = 9

    def __init__(
        self,
        code: int,
        message: str,
        data: Any = None,
        *,
        response: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.data = data
        #: The whole JSON-RPC response (``{"jsonrpc", "id", "error"}``), when it came from one.
        self.response = response

    def __str__(self) -> str:
        return f"{self.message} (code {self.code})"

    def __repr__(self) -> str:
        return f"RpcError(code={self.code!r}, message={self.message!r}, data={self.data!r})"


class TimeoutError(McphostError, builtins.TimeoutError):  # noqa: A001 (shadows the builtin on purpose)
    """MCPHOST_ERR_TIMEOUT: no answer (or no event) within the time allowed."""

    STATUS = 10

    def __init__(self, message: str = "", *, status: int | None = None) -> None:
        McphostError.__init__(self, message, status=status)


class CancelledError(McphostError):
    """MCPHOST_ERR_CANCELLED: the request was cancelled (``mcphost_cancel``).

    Cancelling the asyncio task that awaits a request raises
    ``asyncio.CancelledError`` in that task, as asyncio wants; this one is
    raised to whoever awaits a request that was cancelled by other means
    (:meth:`mcphost.aio.PendingRequest.cancel`).
    """

    STATUS = 11


class ClosedError(McphostError):
    """MCPHOST_ERR_CLOSED: the client was closed, or its connection to the daemon was lost."""

    STATUS = 12


class OnCallbackThreadError(McphostError):
    """MCPHOST_ERR_ON_CALLBACK_THREAD: a blocking call on the library's callback thread."""

    STATUS = 13


class AlreadyAnsweredError(McphostError):
    """MCPHOST_ERR_ALREADY_ANSWERED: the responder was already answered."""

    STATUS = 14


class NotWaitingError(McphostError):
    """MCPHOST_ERR_NOT_WAITING: the server stopped waiting for this answer."""

    STATUS = 15


class InvalidHandleError(McphostError):
    """MCPHOST_ERR_INVALID_HANDLE: not a live handle."""

    STATUS = 16


class RuntimeStartError(McphostError):
    """MCPHOST_ERR_RUNTIME: the library could not start its runtime or threads."""

    STATUS = 17


class PanicError(McphostError):
    """MCPHOST_ERR_PANIC: a bug in mcphost (it panicked and the panic was contained)."""

    STATUS = 18


class UnsupportedError(McphostError):
    """MCPHOST_ERR_UNSUPPORTED: the call is not available on this handle."""

    STATUS = 19


#: status number -> exception class, for every status of the header but OK.
STATUS_CLASSES: dict[int, type[McphostError]] = {
    c.STATUS: c
    for c in (
        NullArgumentError,
        InvalidUtf8Error,
        InvalidJsonError,
        InvalidRequestError,
        ConfigError,
        NotRunningError,
        ConnectError,
        VersionMismatchError,
        RpcError,
        TimeoutError,
        CancelledError,
        ClosedError,
        OnCallbackThreadError,
        AlreadyAnsweredError,
        NotWaitingError,
        InvalidHandleError,
        RuntimeStartError,
        PanicError,
        UnsupportedError,
    )
    if c.STATUS is not None
}

#: status number -> name as in the header (mcphost_status_name gives the same).
STATUS_NAMES: dict[int, str] = {
    0: "MCPHOST_OK",
    1: "MCPHOST_ERR_NULL_ARGUMENT",
    2: "MCPHOST_ERR_INVALID_UTF8",
    3: "MCPHOST_ERR_INVALID_JSON",
    4: "MCPHOST_ERR_INVALID_REQUEST",
    5: "MCPHOST_ERR_CONFIG",
    6: "MCPHOST_ERR_NOT_RUNNING",
    7: "MCPHOST_ERR_CONNECT",
    8: "MCPHOST_ERR_VERSION_MISMATCH",
    9: "MCPHOST_ERR_RPC",
    10: "MCPHOST_ERR_TIMEOUT",
    11: "MCPHOST_ERR_CANCELLED",
    12: "MCPHOST_ERR_CLOSED",
    13: "MCPHOST_ERR_ON_CALLBACK_THREAD",
    14: "MCPHOST_ERR_ALREADY_ANSWERED",
    15: "MCPHOST_ERR_NOT_WAITING",
    16: "MCPHOST_ERR_INVALID_HANDLE",
    17: "MCPHOST_ERR_RUNTIME",
    18: "MCPHOST_ERR_PANIC",
    19: "MCPHOST_ERR_UNSUPPORTED",
}


def error_for_status(
    status: int, message: str | None, response: dict[str, Any] | None = None
) -> McphostError:
    """The exception for a non-OK status (an RpcError from the response's ``error``)."""
    text = message or STATUS_NAMES.get(status, f"mcphost status {status}")
    if status == RpcError.STATUS:
        err = (response or {}).get("error") or {}
        return RpcError(
            err.get("code", 0),
            err.get("message", text),
            err.get("data"),
            response=response,
        )
    cls = STATUS_CLASSES.get(status)
    if cls is None:
        return McphostError(f"{text} (unknown status {status})", status=status)
    return cls(text)
