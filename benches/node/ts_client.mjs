// The TypeScript SDK client for benches/bridge.rs: spawns COMMAND ARGS...
// over stdio, initializes, then times N sequential `callTool` calls of TOOL
// (`echo`), each checked. Prints {"latencies_us":[...]} on stdout.
// Usage: node ts_client.mjs INTEROP_DIR N TOOL COMMAND [ARGS...]
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [interop, n, tool, command, ...args] = process.argv.slice(2);
const sdk = join(interop, "node_modules/@modelcontextprotocol/sdk/dist/esm");
const { Client } = await import(pathToFileURL(join(sdk, "client/index.js")));
const { StdioClientTransport } = await import(pathToFileURL(join(sdk, "client/stdio.js")));

const client = new Client({ name: "mcphost-bench", version: "0" });
await client.connect(new StdioClientTransport({ command, args, stderr: "ignore" }));
const latencies = [];
for (let i = 0; i < Number(n); i++) {
  const text = `c${i}`;
  const t0 = process.hrtime.bigint();
  const r = await client.callTool({ name: tool, arguments: { message: text } });
  const dt = process.hrtime.bigint() - t0;
  const got = r.content?.[0]?.text ?? "";
  if (r.isError || !got.endsWith(` ${text}`)) {
    console.error(`call ${i}: echo of ${text} came back as ${JSON.stringify(r.content)}`);
    process.exit(1);
  }
  latencies.push(Number(dt) / 1000);
}
await client.close();
console.log(JSON.stringify({ latencies_us: latencies }));
