// A TypeScript SDK host for the tests: connects over stdio to COMMAND ARGS
// (`mcphost bridge`), then does what each line of its stdin says and prints
// one JSON line per command on stdout:
//   list              → {"tools": [names]}
//   call NAME JSON    → {"text": "..."} or {"error": "..."}
//   changed           → {"changed": N}  (tools/list_changed seen so far)
// Usage: node ts_host.mjs INTEROP_DIR COMMAND [ARGS...]
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { createInterface } from "node:readline";

const [interop, command, ...args] = process.argv.slice(2);
const sdk = join(interop, "node_modules/@modelcontextprotocol/sdk/dist/esm");
const { Client } = await import(pathToFileURL(join(sdk, "client/index.js")));
const { StdioClientTransport } = await import(pathToFileURL(join(sdk, "client/stdio.js")));
const { ToolListChangedNotificationSchema } = await import(pathToFileURL(join(sdk, "types.js")));

const client = new Client({ name: "ts-host", version: "0" });
let changed = 0;
client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
  changed++;
});
// The SDK's default environment for a child, as desktop apps spawn servers.
await client.connect(new StdioClientTransport({ command, args, stderr: "inherit" }));
const say = (v) => process.stdout.write(JSON.stringify(v) + "\n");
say({ ready: true });

for await (const line of createInterface({ input: process.stdin })) {
  const [verb, name, ...rest] = line.split(" ");
  try {
    if (verb === "list") {
      const r = await client.listTools();
      say({ tools: r.tools.map((t) => t.name) });
    } else if (verb === "call") {
      const r = await client.callTool({ name, arguments: JSON.parse(rest.join(" ") || "{}") });
      say(r.isError ? { error: JSON.stringify(r.content) } : { text: r.content?.[0]?.text ?? "" });
    } else if (verb === "changed") {
      say({ changed });
    } else {
      say({ error: `unknown command ${verb}` });
    }
  } catch (e) {
    say({ error: String(e?.message ?? e) });
  }
}
await client.close();
