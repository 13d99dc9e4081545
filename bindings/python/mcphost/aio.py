"""The asyncio client."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import threading
import time
import warnings
from typing import Any, AsyncIterator, Callable, Generator, Iterable

from . import _core
from .errors import ClosedError, TimeoutError

HostCallable = Callable[[dict[str, Any]], Any]


class PendingRequest:
    """A request in flight (``mcphost_request_async``): await it for the
    ``result``, or :meth:`cancel` it (then awaiting raises
    :class:`mcphost.CancelledError`). Use it on its client's loop."""

    def __init__(self, client: "AsyncClient", body: bytes, method: str) -> None:
        loop = client._loop
        self.method = method
        self._loop = loop
        self._fut: asyncio.Future[tuple[int, str | None, str | None]] = loop.create_future()
        self._lock = threading.Lock()

        def done(status: int, response: str | None, error: str | None) -> None:
            # On the library's callback thread: hand over to the loop.
            try:
                loop.call_soon_threadsafe(self._settle, status, response, error)
            except RuntimeError:
                pass  # the loop is closed; nobody waits

        self._call = client._h.start(body, done)

    def _settle(self, status: int, response: str | None, error: str | None) -> None:
        if not self._fut.done():
            self._fut.set_result((status, response, error))
        self._free()

    def _free(self) -> None:
        with self._lock:
            call, self._call = self._call, 0
        _core.free_call(call)

    def cancel(self) -> None:
        """Cancel the request down to the server (``mcphost_cancel``); a no-op
        once it completed."""
        with self._lock:
            if self._call:
                _core.cancel_call(self._call)

    def done(self) -> bool:
        return self._fut.done()

    async def result(self, timeout: float | None = None) -> dict[str, Any]:
        """The whole JSON-RPC response (``{"jsonrpc", "id", "result"}``)."""
        try:
            if timeout is None:
                status, response, error = await self._fut
            else:
                status, response, error = await asyncio.wait_for(self._fut, timeout)
        except asyncio.TimeoutError:
            self.cancel()
            self._free()
            raise TimeoutError(
                f"{self.method}: no answer within {timeout} s (the request was cancelled)"
            ) from None
        except asyncio.CancelledError:
            # The awaiting task was cancelled: so is the request.
            self.cancel()
            self._free()
            raise
        return _core.outcome(status, response, error)

    def __await__(self) -> Generator[Any, None, Any]:
        async def result() -> Any:
            return (await self.result())["result"]

        return result().__await__()


class AsyncClient:
    """The asyncio form of :class:`mcphost.Client`, bound to the loop it was
    opened on. Open it with :func:`mcphost.open_embedded_async` or
    :func:`mcphost.connect_async`."""

    def __init__(self, handle: _core.Handle, mode: str, loop: asyncio.AbstractEventLoop) -> None:
        self._h = handle
        self._loop = loop
        self.mode = mode  #: "embedded" or "connected"
        self._fd: int | None = None
        self._reading = False
        self._waiters: list[asyncio.Future[None]] = []
        self._closing = False

    # -- requests --

    def start_request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        progress_token: str | int | None = None,
    ) -> PendingRequest:
        """Start a request and return at once; see :class:`PendingRequest`."""
        if self._closing:
            raise ClosedError("the client is closed")
        return PendingRequest(self, _core.request_json(method, params, progress_token), method)

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        progress_token: str | int | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send one request and return its ``result``; raises as
        :meth:`mcphost.Client.request`. Cancelling the awaiting task cancels
        the request down to the server."""
        p = self.start_request(method, params, progress_token=progress_token)
        return (await p.result(timeout))["result"]

    async def request_raw(self, request_json: str, *, timeout: float | None = None) -> str:
        """As :meth:`mcphost.Client.request_raw`."""
        if self._closing:
            raise ClosedError("the client is closed")
        p = PendingRequest(self, request_json.encode(), "request")
        try:
            if timeout is None:
                status, response, error = await p._fut
            else:
                status, response, error = await asyncio.wait_for(p._fut, timeout)
        except asyncio.TimeoutError:
            p.cancel()
            p._free()
            raise TimeoutError(f"no answer within {timeout} s (the request was cancelled)") from None
        except asyncio.CancelledError:
            p.cancel()
            p._free()
            raise
        if status == _core.OK and response is not None:
            return response
        _core.outcome(status, response, error)
        raise AssertionError("unreachable")

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification; mcphost takes ``notifications/roots/list_changed``."""
        body: dict[str, Any] = {"method": method}
        if params is not None:
            body["params"] = params
        self._h.notify(_core.dumps(body))

    async def list_tools(self) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        params: dict[str, Any] | None = None
        while True:
            r = await self.request("tools/list", params)
            tools.extend(r.get("tools", []))
            cursor = r.get("nextCursor")
            if not cursor:
                return tools
            params = {"cursor": cursor}

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        progress_token: str | int | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        return await self.request(
            "tools/call", params, progress_token=progress_token, timeout=timeout
        )

    async def status(self) -> dict[str, Any]:
        return await self.request("mcphost/status")

    async def servers(self) -> list[dict[str, Any]]:
        return await self.request("mcphost/servers/list")

    # -- events (mcphost_event_fd + add_reader + mcphost_next_event(0)) --

    def _on_readable(self) -> None:
        self._stop_reading()
        self._wake(None)

    def _stop_reading(self) -> None:
        if self._reading and self._fd is not None:
            self._loop.remove_reader(self._fd)
        self._reading = False

    def _wake(self, exc: BaseException | None) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                if exc is None:
                    w.set_result(None)
                else:
                    w.set_exception(exc)

    def _readable(self) -> asyncio.Future[None]:
        if self._closing:
            raise ClosedError("the client is closed")
        if self._fd is None:
            self._fd = self._h.event_fd()
        fut: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append(fut)
        if not self._reading:
            self._loop.add_reader(self._fd, self._on_readable)
            self._reading = True
        return fut

    async def next_event(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next event, waiting up to ``timeout`` seconds (None: until one
        comes); None if none came. Raises :class:`ClosedError` once closed."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            if self._closing:
                raise ClosedError("the client is closed")
            ev = self._h.next_event(0)
            if ev is not None:
                return json.loads(ev)
            fut = self._readable()
            if deadline is None:
                await fut
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                await asyncio.wait_for(fut, left)
            except asyncio.TimeoutError:
                return None

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Every event, as they come, until the client is closed::

            async for event in client.events():
                print(event["method"], event.get("params"))
        """
        while True:
            try:
                ev = await self.next_event()
            except ClosedError:
                return
            if ev is not None:
                yield ev

    # -- lifetime --

    @property
    def closed(self) -> bool:
        return self._closing or self._h.closed

    async def aclose(self) -> None:
        """As :meth:`mcphost.Client.close`, without blocking the loop."""
        if self._closing:
            return
        self._closing = True
        # The fd dies with the handle: the loop must stop watching it first.
        self._stop_reading()
        self._wake(ClosedError("the client is closed"))
        await self._loop.run_in_executor(None, self._h.free)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        h = getattr(self, "_h", None)
        if h is not None and not h.closed:
            warnings.warn(
                "mcphost.AsyncClient was not closed; closing it now",
                ResourceWarning,
                stacklevel=2,
            )
            try:
                h.free()
            except Exception:
                pass

    def __repr__(self) -> str:
        return f"<mcphost.AsyncClient {self.mode}{' closed' if self.closed else ''}>"


def _event_sink(
    on_event: Callable[[dict[str, Any]], Any], loop: asyncio.AbstractEventLoop
) -> Callable[[bytes], None]:
    """Events for an AsyncClient's on_event: delivered on its loop, in order
    (an async on_event runs as a task per event)."""
    tasks: set[asyncio.Task[Any]] = set()

    def deliver(event: dict[str, Any]) -> None:
        try:
            r = on_event(event)
            if inspect.isawaitable(r):
                t = loop.create_task(_core._awaited(r))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
        except Exception as e:
            warnings.warn(f"mcphost on_event raised {e!r}", RuntimeWarning, stacklevel=1)

    def sink(raw: bytes) -> None:
        ev = json.loads(raw)
        try:
            loop.call_soon_threadsafe(deliver, ev)
        except RuntimeError:
            pass  # the loop is closed

    return sink


async def open_async(
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
) -> AsyncClient:
    loop = asyncio.get_running_loop()
    dispatch = _core.Dispatch(loop)
    opener = functools.partial(
        _core.open_handle,
        mode,
        target,
        dispatch=dispatch,
        sampling=sampling,
        elicitation=elicitation,
        elicitation_modes=elicitation_modes,
        roots=roots,
        event_sink=None if on_event is None else _event_sink(on_event, loop),
        client_name=client_name,
        request_timeout=request_timeout,
        wait_ready=wait_ready,
    )
    # Opening blocks (wait_ready, the daemon's handshake): not on the loop.
    fut = loop.run_in_executor(None, opener)
    try:
        h = await asyncio.shield(fut)
    except asyncio.CancelledError:

        def close_late(f: "asyncio.Future[_core.Handle]") -> None:
            if not f.cancelled() and f.exception() is None:
                threading.Thread(target=f.result().free, daemon=True).start()

        fut.add_done_callback(close_late)
        raise
    return AsyncClient(h, mode, loop)
