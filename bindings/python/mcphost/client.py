"""The synchronous client."""

from __future__ import annotations

import _thread
import asyncio
import inspect
import json
import time
import warnings
from typing import Any, Callable, Iterable

from . import _core
from .errors import TimeoutError

HostCallable = Callable[[dict[str, Any]], Any]


class _Waiter:
    """Where one request's completion lands (set on the callback thread). A
    bare lock, held until then: cheaper to wake than threading.Event."""

    __slots__ = ("lock", "status", "response", "error")

    def __init__(self) -> None:
        self.lock = _thread.allocate_lock()
        self.lock.acquire()
        self.status = -1
        self.response: str | None = None
        self.error: str | None = None

    def wait(self, timeout: float | None) -> bool:
        return self.lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout))

    def __call__(self, status: int, response: str | None, error: str | None) -> None:
        self.status, self.response, self.error = status, response, error
        self.lock.release()


class Client:
    """A handle on mcphost: an embedded engine or a connection to the daemon.

    Thread-safe: call it from any thread. Open it with
    :func:`mcphost.open_embedded` or :func:`mcphost.connect`.
    """

    def __init__(self, handle: _core.Handle, mode: str) -> None:
        self._h = handle
        self.mode = mode  #: "embedded" or "connected"

    # -- requests --

    def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        progress_token: str | int | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send one request (MCP or ``mcphost/*``) and return its ``result``.

        Raises :class:`RpcError` on an error response, :class:`TimeoutError`
        when ``timeout`` seconds pass (the request is then cancelled down to
        the server), :class:`ClosedError` once the client is closed. With a
        ``progress_token``, the server's progress comes as
        ``notifications/progress`` events carrying that token.
        """
        body = _core.request_json(method, params, progress_token)
        return self._roundtrip(body, timeout, method)["result"]

    def request_raw(self, request_json: str, *, timeout: float | None = None) -> str:
        """Send a JSON-RPC request given as text; return the response as text,
        byte for byte as mcphost relays it (no float or key-order changes).
        Raises as :meth:`request` does."""
        resp = self._roundtrip(request_json.encode(), timeout, "request", raw=True)
        return resp

    def _roundtrip(self, body: bytes, timeout: float | None, what: str, raw: bool = False) -> Any:
        w = _Waiter()
        call = self._h.start(body, w)
        try:
            if not w.wait(timeout):
                _core.cancel_call(call)
                w.wait(5)
                if w.status in (-1, 11):  # cancelled by us, as planned
                    raise TimeoutError(
                        f"{what}: no answer within {timeout} s (the request was cancelled)"
                    )
        except BaseException:
            # Ctrl-C or the timeout: the server is told to stop.
            _core.cancel_call(call)
            raise
        finally:
            _core.free_call(call)
        if raw and w.status == _core.OK:
            assert w.response is not None
            return w.response
        return _core.outcome(w.status, w.response, w.error)

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification; mcphost takes ``notifications/roots/list_changed``."""
        body: dict[str, Any] = {"method": method}
        if params is not None:
            body["params"] = params
        self._h.notify(_core.dumps(body))

    # -- conveniences --

    def list_tools(self) -> list[dict[str, Any]]:
        """Every tool of the namespaced catalog (``server__tool``), all pages."""
        tools: list[dict[str, Any]] = []
        params: dict[str, Any] | None = None
        while True:
            r = self.request("tools/list", params)
            tools.extend(r.get("tools", []))
            cursor = r.get("nextCursor")
            if not cursor:
                return tools
            params = {"cursor": cursor}

    def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        progress_token: str | int | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """``tools/call``: the tool's result (``content``, ``isError``, …)."""
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        return self.request("tools/call", params, progress_token=progress_token, timeout=timeout)

    def status(self) -> dict[str, Any]:
        """``mcphost/status``."""
        return self.request("mcphost/status")

    def servers(self) -> list[dict[str, Any]]:
        """``mcphost/servers/list``: one object per server (state, pid, …)."""
        return self.request("mcphost/servers/list")

    # -- events --

    def next_event(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next event (a JSON-RPC notification as a dict), waiting up to
        ``timeout`` seconds (None: until one comes); None if none came.
        Raises :class:`UnsupportedError` on a client opened with ``on_event``
        and :class:`ClosedError` once it is closed."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            # Short slices keep Ctrl-C and close() responsive.
            left = 0.1 if deadline is None else min(0.1, max(0.0, deadline - time.monotonic()))
            ev = self._h.next_event(int(left * 1000))
            if ev is not None:
                return json.loads(ev)
            if deadline is not None and time.monotonic() >= deadline:
                return None

    # -- lifetime --

    @property
    def closed(self) -> bool:
        return self._h.closed

    def close(self) -> None:
        """Stop every server (embedded: returns when none of their processes
        is left) or leave the daemon; end requests still waiting with
        :class:`ClosedError`. Idempotent."""
        self._h.free()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        h = getattr(self, "_h", None)
        if h is not None and not h.closed:
            warnings.warn(
                "mcphost.Client was not closed; closing it now", ResourceWarning, stacklevel=2
            )
            try:
                h.free()
            except Exception:
                pass

    def __repr__(self) -> str:
        return f"<mcphost.Client {self.mode}{' closed' if self.closed else ''}>"


def _event_sink(on_event: Callable[[dict[str, Any]], Any], dispatch: "_core.Dispatch") -> Callable[[bytes], None]:
    """Events for a sync client's on_event: in order, on one worker thread."""
    is_async = _core.is_async_callable(on_event)

    def run(event: dict[str, Any]) -> None:
        try:
            r = on_event(event)
            if is_async or inspect.isawaitable(r):
                asyncio.run_coroutine_threadsafe(_core._awaited(r), dispatch.loop()).result()
        except Exception as e:  # the host's bug; keep delivering
            warnings.warn(f"mcphost on_event raised {e!r}", RuntimeWarning, stacklevel=1)

    def sink(raw: bytes) -> None:
        dispatch.event_worker().submit(run, json.loads(raw))

    return sink


def _open(
    mode: str,
    target: str | None,
    *,
    sampling: HostCallable | None,
    elicitation: HostCallable | None,
    elicitation_modes: Iterable[str],
    roots: HostCallable | None,
    on_event: Callable[[dict[str, Any]], Any] | None,
    client_name: str | None,
    request_timeout: float | None,
    wait_ready: float | None,
) -> Client:
    dispatch = _core.Dispatch(None)
    h = _core.open_handle(
        mode,
        target,
        dispatch=dispatch,
        sampling=sampling,
        elicitation=elicitation,
        elicitation_modes=elicitation_modes,
        roots=roots,
        event_sink=None if on_event is None else _event_sink(on_event, dispatch),
        client_name=client_name,
        request_timeout=request_timeout,
        wait_ready=wait_ready,
    )
    return Client(h, mode)
