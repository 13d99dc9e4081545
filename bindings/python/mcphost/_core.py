"""The machinery both clients share: the handle, the C trampolines, host
callback dispatch, and request completion.

Every C function pointer the library holds is one of four module-level
trampolines that live as long as the process. What a trampoline acts on is
looked up by its ``user_data``, a small integer key into ``_registry``; the
library's ``free_user_data`` (or the one completion of an async request)
removes the entry, so Python objects live exactly as long as the library
may call them.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import ctypes
import inspect
import itertools
import json
import threading
import weakref
from ctypes import byref, c_int, c_void_p
from typing import Any, Callable, Iterable

from . import _lib
from .errors import ClosedError, McphostError, RpcError, error_for_status

OK = 0
STATUS_TIMEOUT = 10
STATUS_CLOSED = 12

ELICITATION_MODES = {"form": 1, "url": 2}

# JSON-RPC "internal error": what a host callback that raised answers,
# unless it raised RpcError with its own code.
INTERNAL_ERROR = -32603

# ---- strings --------------------------------------------------------------


def take_string(p: c_void_p) -> str | None:
    """Read a string the library returned, and free it."""
    if not p.value:
        return None
    try:
        return ctypes.string_at(p.value).decode("utf-8", "replace")
    finally:
        _lib.lib().mcphost_string_free(p)


def dumps(v: Any) -> bytes:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()


def check(status: int, error: c_void_p) -> None:
    """Raise the exception for `status` (freeing the error string)."""
    message = take_string(error)
    if status != OK:
        raise error_for_status(status, message)


# ---- the registry behind user_data ----------------------------------------

_registry: dict[int, Any] = {}
_registry_lock = threading.Lock()
_keys = itertools.count(1)


def register(obj: Any) -> int:
    key = next(_keys)
    with _registry_lock:
        _registry[key] = obj
    return key


def unregister(key: int | None) -> Any:
    if key is None:
        return None
    with _registry_lock:
        return _registry.pop(key, None)


def lookup(key: int | None) -> Any:
    if key is None:
        return None
    with _registry_lock:
        return _registry.get(key)


def registered_count() -> int:
    """How many Python objects the library may still call (for tests)."""
    with _registry_lock:
        return len(_registry)


# ---- trampolines (run on the library's callback thread: return fast) -----


def _on_free(user_data: int | None) -> None:
    unregister(user_data)


def _on_host_request(user_data: int | None, request_json: bytes, responder: int | None) -> None:
    if not responder:
        return
    reg = lookup(user_data)
    try:
        if reg is None:
            raise McphostError("no host callback is registered for this request")
        reg.submit(request_json, responder)
    except BaseException as e:  # never let an exception into the library's thread
        answer_error(responder, INTERNAL_ERROR, f"the host could not take the request: {e}")


def _on_event(user_data: int | None, event_json: bytes) -> None:
    sink = lookup(user_data)
    if sink is None:
        return
    try:
        sink(event_json)
    except BaseException:
        pass


def _on_response(
    user_data: int | None, status: int, response_json: bytes | None, error: bytes | None
) -> None:
    done = unregister(user_data)
    if done is None:
        return
    try:
        done(
            status,
            response_json.decode("utf-8", "replace") if response_json is not None else None,
            error.decode("utf-8", "replace") if error is not None else None,
        )
    except BaseException:
        pass


FREE_TRAMPOLINE = _lib.FREE_FN(_on_free)
HOST_TRAMPOLINE = _lib.HOST_CALLBACK(_on_host_request)
EVENT_TRAMPOLINE = _lib.EVENT_CALLBACK(_on_event)
RESPONSE_TRAMPOLINE = _lib.RESPONSE_CALLBACK(_on_response)


# ---- responders -------------------------------------------------------------


def answer_result(responder: int, result: Any) -> None:
    """Answer with `result` (a dict), then free the responder."""
    lib = _lib.lib()
    try:
        if not isinstance(result, dict):
            raise TypeError(
                f"a host callback must return a dict (the JSON-RPC result), not {type(result).__name__}"
            )
        err = c_void_p()
        status = lib.mcphost_responder_result(c_void_p(responder), dumps(result), byref(err))
        message = take_string(err)
        if status not in (OK, 14, 15):  # already answered / server gone: nothing to do
            lib.mcphost_responder_error(
                c_void_p(responder), INTERNAL_ERROR, f"bad host answer: {message}".encode(), None, None
            )
    except Exception as e:
        lib.mcphost_responder_error(
            c_void_p(responder), INTERNAL_ERROR, f"bad host answer: {e}".encode(), None, None
        )
    finally:
        lib.mcphost_responder_free(c_void_p(responder))


def answer_error(responder: int, code: int, message: str, data: Any = None) -> None:
    lib = _lib.lib()
    try:
        data_json = None if data is None else dumps(data)
        lib.mcphost_responder_error(c_void_p(responder), int(code), message.encode(), data_json, None)
    finally:
        lib.mcphost_responder_free(c_void_p(responder))


def answer_exception(responder: int, e: BaseException) -> None:
    if isinstance(e, RpcError):
        answer_error(responder, e.code, e.message, e.data)
    else:
        answer_error(responder, INTERNAL_ERROR, f"{type(e).__name__}: {e}")


# ---- running host code off the callback thread ----------------------------


class LoopThread:
    """A private asyncio loop on its own thread, for async callables of a sync Client."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._run, name="mcphost-asyncio", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def stop(self) -> None:
        def cancel_all() -> None:
            for t in asyncio.all_tasks(self.loop):
                t.cancel()
            # Let the cancellations run (they answer their responders).
            self.loop.call_soon(self.loop.stop)

        if self.loop.is_closed():
            return
        try:
            self.loop.call_soon_threadsafe(cancel_all)
        except RuntimeError:
            return
        if threading.current_thread() is self._thread:
            return  # closed from a callback on this loop: it stops after it
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()


class Dispatch:
    """Where a client runs host code: sync callables on a thread pool, async
    ones on an asyncio loop (the AsyncClient's, or a private LoopThread that
    is started on first need)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._loop = loop
        self._own_loop: LoopThread | None = None
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._events: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False
        # Responders handed to us and not yet taken by a job: freed at close
        # if their job never ran.
        self._outstanding: set[int] = set()

    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is not None:
            return self._loop
        with self._lock:
            if self._closed:
                raise ClosedError("the client is closed")
            if self._own_loop is None:
                self._own_loop = LoopThread()
            return self._own_loop.loop

    def pool(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._closed:
                raise ClosedError("the client is closed")
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=8, thread_name_prefix="mcphost-host"
                )
            return self._pool

    def event_worker(self) -> concurrent.futures.ThreadPoolExecutor:
        """One thread, so events reach on_event in order."""
        with self._lock:
            if self._closed:
                raise ClosedError("the client is closed")
            if self._events is None:
                self._events = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="mcphost-events"
                )
            return self._events

    def hold(self, responder: int) -> None:
        with self._lock:
            self._outstanding.add(responder)

    def take(self, responder: int) -> bool:
        """Claim a responder for answering; False if close already freed it."""
        with self._lock:
            if responder in self._outstanding:
                self._outstanding.discard(responder)
                return True
            return False

    def close(self) -> None:
        """After mcphost_free: no new work; responders whose job never ran
        are answered with an error and freed."""
        with self._lock:
            self._closed = True
            pool, events, own = self._pool, self._events, self._own_loop
        for p in (pool, events):
            if p is not None:
                p.shutdown(wait=False, cancel_futures=True)
        if own is not None:
            own.stop()
        with self._lock:
            left = list(self._outstanding)
            self._outstanding.clear()
        for r in left:
            answer_error(r, INTERNAL_ERROR, "the host closed before answering")


def is_async_callable(fn: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    # A callable object with an `async def __call__`.
    return inspect.iscoroutinefunction(type(fn).__call__) if not inspect.isroutine(fn) else False


class HostCallback:
    """One registered host callback (sampling, elicitation or roots)."""

    def __init__(self, fn: Callable[[dict[str, Any]], Any], dispatch: Dispatch) -> None:
        if not callable(fn):
            raise TypeError(f"a host callback must be callable, not {type(fn).__name__}")
        self.fn = fn
        self.dispatch = dispatch

    def submit(self, request_json: bytes, responder: int) -> None:
        d = self.dispatch
        request = json.loads(request_json)
        d.hold(responder)
        try:
            if is_async_callable(self.fn):
                asyncio.run_coroutine_threadsafe(self._run_async(request, responder), d.loop())
            else:
                d.pool().submit(self._run_sync, request, responder)
        except BaseException:
            if not d.take(responder):
                return  # answered elsewhere
            raise

    def _run_sync(self, request: dict[str, Any], responder: int) -> None:
        if not self.dispatch.take(responder):
            return
        try:
            result = self.fn(request)
            if inspect.isawaitable(result):
                result = asyncio.run_coroutine_threadsafe(
                    _awaited(result), self.dispatch.loop()
                ).result()
        except BaseException as e:
            answer_exception(responder, e)
            return
        answer_result(responder, result)

    async def _run_async(self, request: dict[str, Any], responder: int) -> None:
        if not self.dispatch.take(responder):
            return
        try:
            result = await self.fn(request)
        except asyncio.CancelledError:
            answer_error(responder, INTERNAL_ERROR, "the host cancelled its answer")
            raise
        except BaseException as e:
            answer_exception(responder, e)
            return
        answer_result(responder, result)


async def _awaited(aw: Any) -> Any:
    return await aw


# ---- the handle -------------------------------------------------------------

_open_handles: "weakref.WeakSet[Handle]" = weakref.WeakSet()


class Handle:
    """An open ``mcphost*`` with a guard: short C calls run inside it, and
    free waits for them, so the pointer is never used after mcphost_free."""

    def __init__(self, ptr: int, dispatch: Dispatch, keys: list[int]) -> None:
        self._ptr: int | None = ptr
        self._dispatch = dispatch
        self._keys = keys  # registrations the library releases through free_user_data
        self._cv = threading.Condition()
        self._busy = 0
        self._closing = False
        _open_handles.add(self)

    @property
    def closed(self) -> bool:
        return self._closing

    def enter(self) -> int:
        with self._cv:
            if self._closing or self._ptr is None:
                raise ClosedError("the client is closed")
            self._busy += 1
            return self._ptr

    def leave(self) -> None:
        with self._cv:
            self._busy -= 1
            if self._busy == 0:
                self._cv.notify_all()

    def free(self) -> None:
        with self._cv:
            if self._closing:
                return
            self._closing = True
            while self._busy:
                self._cv.wait()
            ptr, self._ptr = self._ptr, None
        # Async requests still running complete with MCPHOST_ERR_CLOSED; the
        # queued callbacks run (their trampolines need our dispatch alive).
        _lib.lib().mcphost_free(c_void_p(ptr))
        self._dispatch.close()
        # free_user_data released them; drop any the library did not.
        for k in self._keys:
            unregister(k)
        _open_handles.discard(self)

    # -- calls --

    def start(self, request_json: bytes, done: Callable[[int, str | None, str | None], None]) -> int:
        """mcphost_request_async: `done(status, response, error)` runs once on
        the callback thread. Returns the call pointer (free it with call_free)."""
        lib = _lib.lib()
        call = c_void_p()
        err = c_void_p()
        ptr = self.enter()
        try:
            key = register(done)
            status = lib.mcphost_request_async(
                c_void_p(ptr), request_json, RESPONSE_TRAMPOLINE, c_void_p(key), byref(call), byref(err)
            )
        finally:
            self.leave()
        if status != OK:
            unregister(key)
            check(status, err)
        take_string(err)
        return call.value or 0

    def notify(self, notification_json: bytes) -> None:
        err = c_void_p()
        ptr = self.enter()
        try:
            status = _lib.lib().mcphost_notify(c_void_p(ptr), notification_json, byref(err))
        finally:
            self.leave()
        check(status, err)

    def next_event(self, timeout_ms: int) -> str | None:
        """One event, or None when none came within timeout_ms (>= 0)."""
        ev = c_void_p()
        err = c_void_p()
        ptr = self.enter()
        try:
            status = _lib.lib().mcphost_next_event(c_void_p(ptr), timeout_ms, byref(ev), byref(err))
        finally:
            self.leave()
        if status == STATUS_TIMEOUT:
            take_string(err)
            return None
        check(status, err)
        return take_string(ev)

    def event_fd(self) -> int:
        fd = c_int(-1)
        err = c_void_p()
        ptr = self.enter()
        try:
            status = _lib.lib().mcphost_event_fd(c_void_p(ptr), byref(fd), byref(err))
        finally:
            self.leave()
        check(status, err)
        return fd.value


def cancel_call(call: int) -> None:
    if call:
        _lib.lib().mcphost_cancel(c_void_p(call))


def free_call(call: int) -> None:
    if call:
        _lib.lib().mcphost_call_free(c_void_p(call))


def request_json(
    method: str, params: dict[str, Any] | None, progress_token: str | int | None
) -> bytes:
    if not isinstance(method, str) or not method:
        raise TypeError("method must be a non-empty string")
    if params is not None and not isinstance(params, dict):
        raise TypeError(f"params must be a dict, not {type(params).__name__}")
    if progress_token is not None:
        params = dict(params or {})
        meta = dict(params.get("_meta") or {})
        meta["progressToken"] = progress_token
        params["_meta"] = meta
    body: dict[str, Any] = {"method": method}
    if params is not None:
        body["params"] = params
    return dumps(body)


def outcome(status: int, response: str | None, error: str | None) -> dict[str, Any]:
    """The parsed response for OK, else the exception for the status."""
    if status == OK:
        if response is None:
            raise McphostError("the library answered OK without a response", status=status)
        return json.loads(response)
    parsed = None
    if response is not None:
        try:
            parsed = json.loads(response)
        except ValueError:
            parsed = None
    raise error_for_status(status, error, parsed)


# ---- opening ----------------------------------------------------------------


def _ms(seconds: float | None, what: str) -> int | None:
    if seconds is None:
        return None
    if seconds < 0:
        raise ValueError(f"{what} must be >= 0 seconds, not {seconds}")
    return max(1, int(round(seconds * 1000))) if seconds > 0 else 0


def _modes(modes: Iterable[str]) -> int:
    if isinstance(modes, str):
        modes = (modes,)
    bits = 0
    for m in modes:
        if m not in ELICITATION_MODES:
            raise ValueError(f"elicitation mode {m!r}: use 'form', 'url' or both")
        bits |= ELICITATION_MODES[m]
    if not bits:
        raise ValueError("elicitation_modes is empty: give 'form', 'url' or both")
    return bits


def open_handle(
    mode: str,
    target: str | None,
    *,
    dispatch: Dispatch,
    sampling: Callable[..., Any] | None,
    elicitation: Callable[..., Any] | None,
    elicitation_modes: Iterable[str],
    roots: Callable[..., Any] | None,
    event_sink: Callable[[bytes], None] | None,
    client_name: str | None,
    request_timeout: float | None,
    wait_ready: float | None,
) -> Handle:
    """Make options, open (embedded: target is the config text; connected:
    the socket path or None), and wrap the handle. Blocks until open."""
    lib = _lib.lib()
    keys: list[int] = []
    opts = lib.mcphost_options_new()
    if not opts:
        raise MemoryError("mcphost_options_new returned NULL")
    try:

        def st(status: int, what: str) -> None:
            if status != OK:
                raise error_for_status(status, f"{what} was refused")

        if client_name is not None:
            st(lib.mcphost_options_set_client_name(opts, client_name.encode()), "client_name")
        if (ms := _ms(request_timeout, "request_timeout")) is not None:
            st(lib.mcphost_options_set_request_timeout_ms(opts, ms), "request_timeout")
        if (ms := _ms(wait_ready, "wait_ready")) is not None:
            st(lib.mcphost_options_set_wait_ready_ms(opts, ms), "wait_ready")

        def reg(obj: Any) -> int:
            k = register(obj)
            keys.append(k)
            return k

        # Each setter takes its user_data: if it fails, free_user_data is
        # not called, and `keys` drops the entry below.
        if sampling is not None:
            k = reg(HostCallback(sampling, dispatch))
            st(lib.mcphost_options_set_sampling(opts, HOST_TRAMPOLINE, c_void_p(k), FREE_TRAMPOLINE), "sampling")
        if elicitation is not None:
            bits = _modes(elicitation_modes)
            k = reg(HostCallback(elicitation, dispatch))
            st(
                lib.mcphost_options_set_elicitation(
                    opts, bits, HOST_TRAMPOLINE, c_void_p(k), FREE_TRAMPOLINE
                ),
                "elicitation",
            )
        if roots is not None:
            k = reg(HostCallback(roots, dispatch))
            st(lib.mcphost_options_set_roots(opts, HOST_TRAMPOLINE, c_void_p(k), FREE_TRAMPOLINE), "roots")
        if event_sink is not None:
            k = reg(event_sink)
            st(
                lib.mcphost_options_set_event_callback(
                    opts, EVENT_TRAMPOLINE, c_void_p(k), FREE_TRAMPOLINE
                ),
                "on_event",
            )

        out = c_void_p()
        err = c_void_p()
        if mode == "embedded":
            assert target is not None
            status = lib.mcphost_open_embedded(target.encode(), opts, byref(out), byref(err))
        else:
            status = lib.mcphost_connect(
                target.encode() if target is not None else None, opts, byref(out), byref(err)
            )
        check(status, err)
        if not out.value:
            raise McphostError("the library opened no handle")
    except BaseException:
        lib.mcphost_options_free(opts)
        opts = None
        dispatch.close()
        for k in keys:
            unregister(k)
        raise
    finally:
        if opts is not None:
            lib.mcphost_options_free(opts)
    return Handle(out.value, dispatch, keys)


def config_text(config: Any) -> str:
    if isinstance(config, str):
        return config
    if isinstance(config, (bytes, bytearray)):
        return bytes(config).decode()
    if isinstance(config, dict):
        return json.dumps(config)
    raise TypeError(
        f"config must be a dict or a JSON/JSONC string, not {type(config).__name__}"
    )


@atexit.register
def _close_all() -> None:
    # Servers must not outlive the interpreter; mcphost_free reaps them.
    for h in list(_open_handles):
        try:
            h.free()
        except Exception:
            pass
