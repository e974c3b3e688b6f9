// A real `ctxledger serve` on a free loopback port over a fresh SQLite file, for a test file.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

export const CTXLEDGER = process.env.CTXLEDGER_BIN
  ?? resolve(import.meta.dirname, "../../../../.venv/bin/ctxledger");

/** A running server: its address, a way to make keys for it, and its stop. */
export interface Served {
  baseUrl: string;
  key: (...args: string[]) => string;
  stop: () => void;
}

async function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const probe = createServer();
    probe.once("error", fail);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      probe.close(() => done(typeof address === "object" && address ? address.port : 0));
    });
  });
}

/** Start `ctxledger serve` and wait until `/healthz` answers. */
export async function serve(): Promise<Served> {
  const folder = mkdtempSync(join(tmpdir(), "ctxledger-ts-"));
  const db = `sqlite:///${join(folder, "ledger.db")}`;
  const key = (...args: string[]): string => {
    const out = execFileSync(CTXLEDGER, ["keys", "create", ...args, "--db", db],
                             { encoding: "utf8" });
    return (JSON.parse(out) as { token: string }).token;
  };
  key("--scope", "warmup");  // creates and migrates the database before the server opens it
  const port = await freePort();
  const baseUrl = `http://127.0.0.1:${port}`;
  const server: ChildProcess = spawn(CTXLEDGER, ["serve", "--db", db, "--port", String(port)],
                                     { stdio: "inherit" });
  const stop = (): void => {
    server.kill("SIGTERM");
    rmSync(folder, { recursive: true, force: true });
  };
  const deadline = Date.now() + 120_000;  // generous: a loaded machine starts slowly
  while (Date.now() < deadline) {
    try {
      if ((await fetch(`${baseUrl}/healthz`)).ok) return { baseUrl, key, stop };
    } catch { /* not listening yet */ }
    await new Promise((wait) => setTimeout(wait, 100));
  }
  stop();
  throw new Error("ctxledger serve did not start");
}

/**
 * `fetch` on a connection of its own: a pooled one idle for seconds (a test creating a key
 * in between) may be closed by the server just as it is reused, failing the request.
 */
export const closing: typeof globalThis.fetch = async (input, init) => {
  const request = new Request(input, init);
  request.headers.set("Connection", "close");
  return fetch(request);
};
