// The packed package as a user gets it: `npm pack`, installed into a fresh project outside
// the repository (its dependencies from the npm registry), the README's quick start
// compiled with `tsc --strict` (no skipLibCheck) and run against a real server; a misspelt
// route and a wrong body fail to compile.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, test } from "node:test";

import { CTXLEDGER, serve, type Served } from "./serve.js";

const PACKAGE = resolve(import.meta.dirname, "../..");
const NPM = process.platform === "win32" ? "npm.cmd" : "npm";
const own = JSON.parse(readFileSync(join(PACKAGE, "package.json"), "utf8")) as {
  name: string; version: string; devDependencies: Record<string, string> };
const installed = (name: string): string => (JSON.parse(readFileSync(
  join(PACKAGE, "node_modules", name, "package.json"), "utf8")) as { version: string }).version;

let project = "";
let served: Served;

function quickStart(): string {
  const readme = readFileSync(join(PACKAGE, "README.md"), "utf8");
  const blocks = [...readme.matchAll(/^```ts\n([\s\S]*?)^```/gm)].map((m) => m[1]);
  const found = blocks.find((block) => block.includes("createCtxledgerClient"));
  assert.ok(found, "the README has a quick start");
  return found;
}

function compile(file: string): { status: number | null; output: string } {
  const tsc = join(project, "node_modules", "typescript", "bin", "tsc");
  const run = spawnSync(process.execPath, [tsc, "--strict", "--target", "ES2022", "--module", "NodeNext", "--moduleResolution", "NodeNext",
    "--types", "node", "--outDir", "out", file], { cwd: project, encoding: "utf8" });
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

before(async () => {
  project = mkdtempSync(join(tmpdir(), "ctxledger-client-user-"));
  const packed = execFileSync(NPM, ["pack", "--silent", "--pack-destination", project],
                              { cwd: PACKAGE, encoding: "utf8" }).trim().split("\n").pop() ?? "";
  assert.ok(packed.endsWith(".tgz"), `npm pack printed ${packed}`);
  writeFileSync(join(project, "package.json"),
                JSON.stringify({ name: "user-app", private: true, type: "module" }));
  execFileSync(NPM, ["install", "--no-audit", "--no-fund", "--silent", join(project, packed),
                     `typescript@${installed("typescript")}`,
                     `@types/node@${installed("@types/node")}`], { cwd: project });
  served = await serve();
});

after(() => {
  served?.stop();
  if (project) rmSync(project, { recursive: true, force: true });
});

test("the tarball holds the declarations, the OpenAPI types among them", () => {
  const dist = join(project, "node_modules", own.name, "dist", "src");
  const files = readdirSync(dist).sort();
  assert.deepEqual(files, ["index.d.ts", "index.js", "schema.d.ts", "schema.js"]);
  assert.match(readFileSync(join(dist, "schema.d.ts"), "utf8"),
               /"\/sessions\/\{session\}\/turn": \{/);
  const manifest = JSON.parse(readFileSync(join(project, "node_modules", own.name,
                                                "package.json"), "utf8")) as
    { version: string; exports: Record<string, { types: string }> };
  assert.equal(manifest.version, own.version);
  assert.equal(manifest.exports["."].types, "./dist/src/index.d.ts");
  const version = execFileSync(CTXLEDGER, ["--version"], { encoding: "utf8" });
  assert.match(version, new RegExp(`\\b${own.version.replaceAll(".", "\\.")}\\b`));
});

test("the README's quick start compiles strictly and runs against a server", () => {
  writeFileSync(join(project, "quickstart.ts"), quickStart());
  const compiled = compile("quickstart.ts");
  assert.equal(compiled.status, 0, compiled.output);
  const run = spawnSync(process.execPath, [join(project, "out", "quickstart.js")], {
    cwd: project, encoding: "utf8",
    env: { ...process.env, CTXLEDGER_URL: served.baseUrl,
           CTXLEDGER_KEY: served.key("--scope", "default") } });
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /^version 1$/m);
  assert.match(run.stdout, /^context \{"messages":\[\{"role":"user","content":"Hello!"\}\]\}$/m);
  assert.match(run.stdout, /^audit \{"match":1,/m);
});

const PRELUDE = `import { createCtxledgerClient } from "@ctxledger/client";
const client = createCtxledgerClient({ baseUrl: "http://127.0.0.1:1", apiKey: "k" });
`;

test("a misspelt route does not compile", () => {
  writeFileSync(join(project, "misspelt.ts"), `${PRELUDE}
await client.GET("/sesions/{session}/state", { params: { path: { session: "s" } } });
`);
  const compiled = compile("misspelt.ts");
  assert.notEqual(compiled.status, 0);
  assert.match(compiled.output, /misspelt\.ts\(4,\d+\): error TS2345: Argument of type '"\/sesions\/\{session\}\/state"' is not assignable/);
});

test("a wrong body does not compile", () => {
  writeFileSync(join(project, "body.ts"), `${PRELUDE}
await client.POST("/sessions/{session}/turn", {
  params: { path: { session: "s" } },
  body: { mesages: [{ role: "user", content: "hi" }] },
});
`);
  const compiled = compile("body.ts");
  assert.notEqual(compiled.status, 0);
  assert.match(compiled.output, /body\.ts\(6,\d+\): error TS2561: .*'mesages' does not exist .* Did you mean to write 'messages'\?/);
});
