"""Finding and loading libmcphost, and the prototypes of its functions.

The library is looked up once, on first use: ``$MCPHOST_LIBRARY`` (a path)
wins, else the copy bundled next to this package (``libmcphost.so``, or
``libmcphost.dylib`` on macOS). Its ABI version must be the one this
package was written for.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path

from .errors import AbiMismatchError, LibraryNotFoundError

#: The ``MCPHOST_ABI_VERSION`` of the header this package was written for.
ABI_VERSION = 1

#: The environment variable naming the library to load (a path).
LIBRARY_ENV = "MCPHOST_LIBRARY"

LIBRARY_NAME = "libmcphost.dylib" if sys.platform == "darwin" else "libmcphost.so"

# typedef void (*mcphost_host_callback)(void *user_data, const char *request_json,
#                                       struct mcphost_responder *responder);
HOST_CALLBACK = CFUNCTYPE(None, c_void_p, c_char_p, c_void_p)
# typedef void (*mcphost_free_fn)(void *user_data);
FREE_FN = CFUNCTYPE(None, c_void_p)
# typedef void (*mcphost_event_callback)(void *user_data, const char *event_json);
EVENT_CALLBACK = CFUNCTYPE(None, c_void_p, c_char_p)
# typedef void (*mcphost_response_callback)(void *user_data, mcphost_status status,
#                                           const char *response_json, const char *error);
RESPONSE_CALLBACK = CFUNCTYPE(None, c_void_p, c_uint32, c_char_p, c_char_p)

_P = POINTER(c_void_p)

# name: (restype, argtypes). Returned strings the caller frees are c_void_p
# (a c_char_p restype would copy and lose the pointer).
_PROTOTYPES = {
    "mcphost_abi_version": (c_uint32, []),
    "mcphost_version": (c_char_p, []),
    "mcphost_status_name": (c_char_p, [c_uint32]),
    "mcphost_string_free": (None, [c_void_p]),
    "mcphost_options_new": (c_void_p, []),
    "mcphost_options_free": (None, [c_void_p]),
    "mcphost_options_set_client_name": (c_uint32, [c_void_p, c_char_p]),
    "mcphost_options_set_request_timeout_ms": (c_uint32, [c_void_p, c_uint64]),
    "mcphost_options_set_wait_ready_ms": (c_uint32, [c_void_p, c_uint64]),
    "mcphost_options_set_sampling": (c_uint32, [c_void_p, HOST_CALLBACK, c_void_p, FREE_FN]),
    "mcphost_options_set_elicitation": (
        c_uint32,
        [c_void_p, c_uint32, HOST_CALLBACK, c_void_p, FREE_FN],
    ),
    "mcphost_options_set_roots": (c_uint32, [c_void_p, HOST_CALLBACK, c_void_p, FREE_FN]),
    "mcphost_options_set_event_callback": (
        c_uint32,
        [c_void_p, EVENT_CALLBACK, c_void_p, FREE_FN],
    ),
    "mcphost_open_embedded": (c_uint32, [c_char_p, c_void_p, _P, _P]),
    "mcphost_connect": (c_uint32, [c_char_p, c_void_p, _P, _P]),
    "mcphost_free": (None, [c_void_p]),
    "mcphost_request": (c_uint32, [c_void_p, c_char_p, _P, _P]),
    "mcphost_request_async": (
        c_uint32,
        [c_void_p, c_char_p, RESPONSE_CALLBACK, c_void_p, _P, _P],
    ),
    "mcphost_cancel": (c_uint32, [c_void_p]),
    "mcphost_call_free": (None, [c_void_p]),
    "mcphost_notify": (c_uint32, [c_void_p, c_char_p, _P]),
    "mcphost_responder_result": (c_uint32, [c_void_p, c_char_p, _P]),
    "mcphost_responder_error": (c_uint32, [c_void_p, c_int64, c_char_p, c_char_p, _P]),
    "mcphost_responder_free": (None, [c_void_p]),
    "mcphost_next_event": (c_uint32, [c_void_p, c_int32, _P, _P]),
    "mcphost_event_fd": (c_uint32, [c_void_p, POINTER(c_int), _P]),
}

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_path: Path | None = None


def _candidates() -> tuple[Path, bool]:
    """The path to load, and whether it came from the environment."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        return Path(env), True
    return Path(__file__).resolve().parent / LIBRARY_NAME, False


def _load(path: Path, from_env: bool) -> ctypes.CDLL:
    if not path.is_file():
        if from_env:
            raise LibraryNotFoundError(
                f"${LIBRARY_ENV} is {str(path)!r}, which is not a file: point it at "
                f"{LIBRARY_NAME} (cargo build -p mcphost-c puts it in target/debug/)"
            )
        raise LibraryNotFoundError(
            f"{LIBRARY_NAME} is not bundled at {path}: install the mcphost wheel, which "
            f"carries it, or set ${LIBRARY_ENV} to its path"
        )
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise LibraryNotFoundError(f"cannot load {path}: {e}") from e
    try:
        lib.mcphost_abi_version.restype = c_uint32
        lib.mcphost_abi_version.argtypes = []
        found = lib.mcphost_abi_version()
    except AttributeError as e:
        raise AbiMismatchError(
            f"{path} is not libmcphost (it has no mcphost_abi_version)", path=path
        ) from e
    if found != ABI_VERSION:
        raise AbiMismatchError(
            f"{path} has ABI version {found}, but this mcphost package was written for "
            f"ABI version {ABI_VERSION}: install the package and the library from the "
            f"same release (or point ${LIBRARY_ENV} at a matching library)",
            path=path,
            found=found,
            expected=ABI_VERSION,
        )
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError as e:
            raise AbiMismatchError(
                f"{path} reports ABI version {found} but has no {name}", path=path
            ) from e
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def lib() -> ctypes.CDLL:
    """The loaded library (loaded and checked on the first call)."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            path, from_env = _candidates()
            _lib = _load(path, from_env)
            _path = path
    return _lib


def library_path() -> Path:
    """The path of the library in use (loading it if needed)."""
    lib()
    assert _path is not None
    return _path
