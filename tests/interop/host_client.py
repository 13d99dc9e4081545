"""A host on the official Python MCP SDK that reaches the mcphost daemon
through `mcphost bridge`, for tests/it/host_callbacks.rs.

    python host_client.py MCPHOST SOCKET [options]

It declares `sampling`, `elicitation` (form and url) and `roots` by giving
`ClientSession` the three callbacks, answers server requests as the options
say, runs a scenario, and prints ONE JSON report on stdout:

    {"initialize": {...}, "steps": [...], "callbacks": [...],
     "progress": [...], "logs": [...], "inbound": [{"t": s, "line": raw}, ...],
     "timedOut": bool}

`inbound` is every line the bridge wrote to us, verbatim, so a test can check
bytes; `callbacks` are the server requests the SDK handed to our callbacks
(with their params as they came on the wire, `_meta` included).

Progress of the run is also told on stderr, one line each, for a test that
drives several hosts at once:  HOST_EVENT {"event": "ready" | "mark" |
"callback" | "step" | "exiting", ...}

Options:
  --name NAME               clientInfo.name (default host-client)
  --roots URI[=NAME]        a root the roots callback returns (repeatable)
  --no-sampling, --no-elicitation, --no-roots
                            leave that callback (and capability) out
  --sample-text TEXT        the sampling answer's text
  --sample-delay S          wait S seconds before answering sampling
  --elicit-answer JSON      the answer to a form elicitation (default decline)
  --url-elicit-answer JSON  the answer to a URL elicitation (default accept)
  --elicit-delay S          wait S seconds before answering an elicitation
  --exit-during-elicitation on the first elicitation, say so on stderr and
                            exit at once (os._exit) without answering
  --register-primary        send mcphost/host/register {} after initialize
  --call TOOL ARGS_JSON     call a tool with a progress token (repeatable)
  --scenario JSON           a list of steps, run after the --call steps
  --hold                    at the end, wait until stdin closes
  --deadline S              give up on the scenario after S s (default 120)

Steps (objects with "do"; "label" names one; "bg": true runs it in the
background, "timeout" bounds it, default 60 s; "needs": LABEL or [LABELS]
skips it, as failed, when one of those steps failed):
  {"do": "call", "tool": T, "args": {}, "id": ID, "meta": {}}
                                      (always with a progress token: the
                                      SDK uses the request id; "retry_until":
                                      TEXT repeats the call every 0.25 s until
                                      its result's JSON contains TEXT;
                                      "retry_while": TEXT, while it does;
                                      "cancel_after": S abandons it after S s,
                                      so the SDK sends notifications/cancelled)
  {"do": "request", "method": M, "params": {...}, "id": ID}
  {"do": "notify", "method": M, "params": {...}}
  {"do": "register"} / {"do": "unregister"}
  {"do": "set_roots", "roots": [{"uri": .., "name": ..}], "notify": true}
  {"do": "wait", "for": L}            wait for a background step
  {"do": "until", "method": M, "kind": "request"|"notification",
   "contains": TEXT, "count": N}      wait until N inbound messages match
                                      ("contains" may be a list: any of them)
  {"do": "sleep", "s": S}
  {"do": "mark", "name": N}           HOST_EVENT mark on stderr
  {"do": "stdin"}                     wait for one line on stdin (or EOF)
  {"do": "hold"}                      wait until stdin closes
  {"do": "exit"}                      HOST_EVENT exiting, then exit at once
                                      (os._exit), calls still in flight
  {"do": "ready"}                     HOST_EVENT ready on stderr (told once
                                      anyway: after initialize, or after
                                      --register-primary's registration)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

T0 = time.monotonic()


def now() -> float:
    return round(time.monotonic() - T0, 4)


def event(**fields: Any) -> None:
    print("HOST_EVENT " + json.dumps(fields), file=sys.stderr, flush=True)


def error_of(e: BaseException) -> dict[str, Any]:
    if isinstance(e, MCPError):
        return {"code": e.code, "message": e.message, "data": e.data}
    return {"code": None, "message": f"{type(e).__name__}: {e}", "data": None}


class Wire:
    """Every line received from the bridge, verbatim, in order."""

    def __init__(self) -> None:
        self.inbound: list[dict[str, Any]] = []
        self.changed = anyio.Event()

    def add(self, line: str) -> None:
        self.inbound.append({"t": now(), "line": line})
        self.changed.set()
        self.changed = anyio.Event()

    def request_line(self, request_id: Any) -> str | None:
        for item in reversed(self.inbound):
            try:
                msg = json.loads(item["line"])
            except ValueError:
                continue
            if isinstance(msg, dict) and "method" in msg and msg.get("id") == request_id:
                return item["line"]
        return None

    def count(self, method: str, kind: str | None, contains: str | list[str] | None) -> int:
        n = 0
        for item in self.inbound:
            try:
                msg = json.loads(item["line"])
            except ValueError:
                continue
            if not isinstance(msg, dict) or msg.get("method") != method:
                continue
            if kind == "request" and "id" not in msg:
                continue
            if kind == "notification" and "id" in msg:
                continue
            if isinstance(contains, str) and contains not in item["line"]:
                continue
            if isinstance(contains, list) and not any(c in item["line"] for c in contains):
                continue
            n += 1
        return n


async def bridge_transport(cmd: list[str], wire: Wire, tg: anyio.abc.TaskGroup):
    """`mcphost bridge` as a child; the SDK's stream pair over its stdio."""
    proc = await anyio.open_process(cmd, stdin=-1, stdout=-1, stderr=None)
    read_w, read_r = anyio.create_memory_object_stream[SessionMessage | Exception](256)
    write_w, write_r = anyio.create_memory_object_stream[SessionMessage](256)

    async def reader() -> None:
        assert proc.stdout is not None
        buf = b""
        async with read_w:
            try:
                async for chunk in proc.stdout:
                    buf += chunk
                    while b"\n" in buf:
                        raw, buf = buf.split(b"\n", 1)
                        line = raw.decode("utf-8", "replace").strip()
                        if not line:
                            continue
                        wire.add(line)
                        try:
                            msg = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                        except ValueError as e:
                            await read_w.send(e)
                            continue
                        await read_w.send(SessionMessage(msg))
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass

    async def writer() -> None:
        assert proc.stdin is not None
        async with write_r:
            async for sm in write_r:
                text = sm.message.model_dump_json(by_alias=True, exclude_unset=True)
                try:
                    await proc.stdin.send((text + "\n").encode())
                except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    return

    tg.start_soon(reader)
    tg.start_soon(writer)
    return proc, read_r, write_w


class Host:
    def __init__(self, opts: argparse.Namespace) -> None:
        self.opts = opts
        self.wire = Wire()
        self.roots: list[dict[str, Any]] = []
        for r in opts.roots:
            uri, _, name = r.partition("=")
            self.roots.append({"uri": uri, "name": name} if name else {"uri": uri})
        self.callbacks: list[dict[str, Any]] = []
        self.progress: list[dict[str, Any]] = []
        self.logs: list[dict[str, Any]] = []
        self.steps: list[dict[str, Any]] = []
        self.initialize: dict[str, Any] | None = None
        self.session: ClientSession | None = None
        self.done: dict[str, anyio.Event] = {}
        self.ok: dict[str, bool] = {}

    # ----------------------------------------------------------- callbacks

    def _record(self, method: str, ctx: Any, answer: Any) -> dict[str, Any]:
        line = self.wire.request_line(ctx.request_id)
        params = (json.loads(line).get("params") if line else None) or {}
        server = (params.get("_meta") or {}).get("dev.mcphost/server")
        entry = {"t": now(), "method": method, "id": ctx.request_id, "params": params, "line": line, "answer": answer}
        self.callbacks.append(entry)
        event(event="callback", method=method, id=ctx.request_id, server=server)
        return entry

    async def on_sampling(self, ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        answer = {
            "role": "assistant",
            "content": {"type": "text", "text": self.opts.sample_text},
            "model": "host-client-model",
            "stopReason": "endTurn",
        }
        self._record("sampling/createMessage", ctx, answer)
        if self.opts.sample_delay:
            await anyio.sleep(self.opts.sample_delay)
        return types.CreateMessageResult.model_validate(answer)

    async def on_elicitation(self, ctx: Any, params: types.ElicitRequestParams) -> Any:
        url_mode = getattr(params, "mode", None) == "url"
        answer = json.loads(self.opts.url_elicit_answer if url_mode else self.opts.elicit_answer)
        entry = self._record("elicitation/create", ctx, answer)
        if self.opts.exit_during_elicitation:
            event(event="exiting", method="elicitation/create", id=ctx.request_id)
            sys.stdout.flush()
            os._exit(0)
        if self.opts.elicit_delay:
            await anyio.sleep(self.opts.elicit_delay)
        entry["answeredAt"] = now()
        return types.ElicitResult.model_validate(answer)

    async def on_roots(self, ctx: Any) -> Any:
        answer = {"roots": list(self.roots)}
        self._record("roots/list", ctx, answer)
        return types.ListRootsResult.model_validate(answer)

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append({"t": now(), **params.model_dump(by_alias=True, mode="json", exclude_none=True)})

    async def on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            event(event="transport-error", error=str(message))

    # --------------------------------------------------------------- steps

    async def raw_request(self, method: str, params: Any, step: dict[str, Any], label: str) -> Any:
        assert self.session is not None
        opts: dict[str, Any] = {"timeout": float(step.get("timeout", 60))}
        if "id" in step:
            opts["request_id"] = step["id"]
        if step.get("progress"):

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                self.progress.append(
                    {"t": now(), "label": label, "progress": progress, "total": total, "message": message}
                )

            opts["on_progress"] = on_progress
        return await self.session._dispatcher.send_raw_request(method, params, opts)  # noqa: SLF001

    async def run_step(self, i: int, step: dict[str, Any]) -> None:
        label = str(step.get("label", i))
        record: dict[str, Any] = {"i": i, "label": label, "do": step.get("do"), "startedAt": now()}
        self.steps.append(record)
        needs = step.get("needs", [])
        failed = [n for n in ([needs] if isinstance(needs, str) else needs) if not self.ok.get(str(n), False)]
        if failed:
            record.update(ok=False, error={"code": None, "message": f"skipped: needs {failed}", "data": None})
            record["endedAt"] = now()
            self.done.setdefault(label, anyio.Event()).set()
            return
        try:
            with anyio.fail_after(float(step.get("timeout", 60)) + 1):
                record["result"] = await self.step_body(step, label)
            record["ok"] = True
        except Exception as e:  # a failed step is reported, the scenario goes on
            record["ok"] = False
            record["error"] = error_of(e)
        record["endedAt"] = now()
        self.ok[label] = record["ok"]
        event(event="step", i=i, label=label, ok=record["ok"])
        self.done.setdefault(label, anyio.Event()).set()

    async def step_body(self, step: dict[str, Any], label: str) -> Any:
        do = step.get("do")
        assert self.session is not None
        if do == "call":
            params: dict[str, Any] = {"name": step["tool"], "arguments": step.get("args", {})}
            if step.get("meta"):
                params["_meta"] = step["meta"]
            if "cancel_after" in step:
                with anyio.move_on_after(float(step["cancel_after"])):
                    return await self.raw_request("tools/call", params, {"progress": True, **step}, label)
                return {"abandoned": True}
            want, unwanted = step.get("retry_until"), step.get("retry_while")
            while True:
                result = await self.raw_request("tools/call", params, {"progress": True, **step}, label)
                text = json.dumps(result)
                if (want is None or want in text) and (unwanted is None or unwanted not in text):
                    return result
                await anyio.sleep(0.25)
        if do == "request":
            return await self.raw_request(step["method"], step.get("params"), step, label)
        if do == "notify":
            await self.session._dispatcher.notify(step["method"], step.get("params"))  # noqa: SLF001
            return None
        if do == "register":
            return await self.raw_request("mcphost/host/register", {}, step, label)
        if do == "unregister":
            return await self.raw_request("mcphost/host/unregister", {}, step, label)
        if do == "set_roots":
            self.roots = list(step.get("roots", []))
            if step.get("notify", True):
                await self.session._dispatcher.notify("notifications/roots/list_changed", None)  # noqa: SLF001
            return None
        if do == "wait":
            await self.done.setdefault(str(step["for"]), anyio.Event()).wait()
            return None
        if do == "until":
            want = int(step.get("count", 1))
            while self.wire.count(step["method"], step.get("kind"), step.get("contains")) < want:
                await self.wire.changed.wait()
            return None
        if do == "sleep":
            await anyio.sleep(float(step["s"]))
            return None
        if do == "mark":
            event(event="mark", name=step["name"])
            return None
        if do == "stdin":
            return await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        if do == "hold":
            # readline returns "" only at EOF.
            while await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True):
                pass
            return None
        if do == "exit":
            event(event="exiting", method=None, id=None)
            sys.stdout.flush()
            os._exit(0)
        if do == "ready":
            event(event="ready")
            return None
        raise ValueError(f"unknown step {do!r}")

    async def run(self, scenario: list[dict[str, Any]]) -> bool:
        cmd = [self.opts.mcphost, "--socket", self.opts.socket, "bridge"]
        kwargs: dict[str, Any] = {"logging_callback": self.on_log, "message_handler": self.on_message}
        if not self.opts.no_sampling:
            kwargs["sampling_callback"] = self.on_sampling
        if not self.opts.no_elicitation:
            kwargs["elicitation_callback"] = self.on_elicitation
        if not self.opts.no_roots:
            kwargs["list_roots_callback"] = self.on_roots
        timed_out = False
        async with anyio.create_task_group() as transport_tg:
            proc, read, write = await bridge_transport(cmd, self.wire, transport_tg)
            try:
                async with ClientSession(
                    read, write, client_info=types.Implementation(name=self.opts.name, version="0"), **kwargs
                ) as session:
                    self.session = session
                    init = await session.initialize()
                    self.initialize = init.model_dump(by_alias=True, mode="json", exclude_none=True)
                    with anyio.move_on_after(self.opts.deadline) as scope:
                        async with anyio.create_task_group() as tg:
                            for i, step in enumerate(scenario):
                                if step.get("bg"):
                                    tg.start_soon(self.run_step, i, step)
                                else:
                                    await self.run_step(i, step)
                    timed_out = scope.cancelled_caught
            finally:
                with anyio.CancelScope(shield=True):
                    if proc.stdin is not None:
                        await proc.stdin.aclose()
                    with anyio.move_on_after(5):
                        await proc.wait()
                    if proc.returncode is None:
                        proc.kill()
                transport_tg.cancel_scope.cancel()
        return timed_out


def parse() -> tuple[argparse.Namespace, list[dict[str, Any]]]:
    p = argparse.ArgumentParser()
    p.add_argument("mcphost")
    p.add_argument("socket")
    p.add_argument("--name", default="host-client")
    p.add_argument("--roots", action="append", default=[])
    p.add_argument("--no-sampling", action="store_true")
    p.add_argument("--no-elicitation", action="store_true")
    p.add_argument("--no-roots", action="store_true")
    p.add_argument("--sample-text", default="sampled by the host client")
    p.add_argument("--sample-delay", type=float, default=0)
    p.add_argument("--elicit-answer", default='{"action": "decline"}')
    p.add_argument("--url-elicit-answer", default='{"action": "accept"}')
    p.add_argument("--elicit-delay", type=float, default=0)
    p.add_argument("--exit-during-elicitation", action="store_true")
    p.add_argument("--register-primary", action="store_true")
    p.add_argument("--call", nargs=2, action="append", default=[], metavar=("TOOL", "ARGS_JSON"))
    p.add_argument("--scenario", default="[]")
    p.add_argument("--hold", action="store_true")
    p.add_argument("--deadline", type=float, default=120)
    opts = p.parse_args()
    steps: list[dict[str, Any]] = []
    if opts.register_primary:
        steps.append({"do": "register", "label": "register"})
    steps.append({"do": "ready", "label": "ready"})
    steps += [{"do": "call", "tool": t, "args": json.loads(a), "label": f"call:{t}"} for t, a in opts.call]
    steps += json.loads(opts.scenario)
    if opts.hold:
        steps.append({"do": "hold", "label": "hold", "timeout": opts.deadline})
    return opts, steps


async def main() -> None:
    opts, steps = parse()
    host = Host(opts)
    timed_out = False
    fatal = None
    try:
        timed_out = await host.run(steps)
    except Exception as e:  # reported, not raised: the test reads the report
        fatal = error_of(e)
    print(
        json.dumps(
            {
                "initialize": host.initialize,
                "steps": host.steps,
                "callbacks": host.callbacks,
                "progress": host.progress,
                "logs": host.logs,
                "inbound": host.wire.inbound,
                "timedOut": timed_out,
                "fatal": fatal,
            }
        ),
        flush=True,
    )


anyio.run(main)
