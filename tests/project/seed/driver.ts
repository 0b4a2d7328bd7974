// Runs traces of IStorageAdapter calls against the seed's MemoryAdapter, a fresh adapter per
// trace. stdin: JSON [[[method, ...args], ...], ...]; stdout: JSON [[result, ...], ...], each
// result copied through JSON at the time of its call (null for void and null).
import { readFileSync } from "node:fs";
import { MemoryAdapter } from "./MemoryAdapter";

type Adapter = Record<string, (...args: unknown[]) => Promise<unknown>>;

async function run(trace: [string, ...unknown[]][]): Promise<unknown[]> {
  const adapter = new MemoryAdapter() as unknown as Adapter;
  const results: unknown[] = [];
  for (const [method, ...args] of trace) {
    const result = await adapter[method](...args);
    results.push(JSON.parse(JSON.stringify(result ?? null)));
  }
  return results;
}

async function main(): Promise<void> {
  const traces = JSON.parse(readFileSync(0, "utf-8")) as [string, ...unknown[]][][];
  const out: unknown[][] = [];
  for (const trace of traces) out.push(await run(trace));
  process.stdout.write(JSON.stringify(out));
}

main().catch((err: unknown) => {
  process.stderr.write(String(err instanceof Error ? err.stack : err) + "\n");
  process.exit(1);
});
