// The client against a real `ctxledger serve` on loopback: a session in scope A, a chat
// turn with tool calls, the context in OpenAI's shape, the live change feed, a key of
// scope B that finds nothing (404), and a conflict (409). Run by `.ci/run` (make test).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { createCtxledgerClient, followEvents, type FeedEvent } from "../src/index.js";
import { closing, serve, type Served } from "./serve.js";

let served: Served;
let baseUrl = "";

function key(...args: string[]): string {
  return served.key(...args);
}

before(async () => {
  served = await serve();
  baseUrl = served.baseUrl;
});

after(() => {
  served?.stop();
});

const CALL = { id: "call_1", type: "function" as const,
               function: { name: "get_weather", arguments: "{\"city\": \"Lisbon\"}" } };

test("a turn with tool calls, the context as OpenAI takes it, and the feed", async () => {
  const apiKey = key("--scope", "team-a");
  const client = createCtxledgerClient({ baseUrl, fetch: closing, apiKey });
  const started = await client.POST("/streams/{stream_id}/events", {
    params: { path: { stream_id: "trip-1" } },
    body: { events: [{ type: "session.started", data: { scope: "team-a" } }],
            expected_version: 0 },
  });
  assert.equal(started.response.status, 200, JSON.stringify(started.error));
  assert.deepEqual(started.data?.positions.length, 1);

  const turn = await client.POST("/sessions/{session}/turn", {
    params: { path: { session: "trip-1" } },
    body: { messages: [
      { role: "user", content: "Weather in Lisbon?" },
      { role: "assistant", content: null, tool_calls: [CALL] },
      { role: "tool", tool_call_id: "call_1", content: "{\"temp_c\": 21}" },
      { role: "assistant", content: "21 degrees and sunny." },
    ], format: "openai" },
  });
  assert.equal(turn.response.status, 200, JSON.stringify(turn.error));
  assert.equal(turn.data?.append.stream_version, 5);
  assert.equal(turn.data?.recorded?.stream_version, 6);  // the turn's assembly, for audit

  const context = await client.GET("/sessions/{session}/assemble", {
    params: { path: { session: "trip-1" }, query: { format: "openai" } },
  });
  assert.equal(context.response.status, 200);
  const messages = (context.data as unknown as { messages: Array<Record<string, unknown>> })
    .messages;
  const calling = messages.find((m) => Array.isArray(m.tool_calls));
  assert.deepEqual((calling?.tool_calls as unknown[])[0], CALL);
  assert.deepEqual(messages.at(-1), { role: "assistant", content: "21 degrees and sunny." });

  // The feed: the six events so far, then one appended while following.
  const stop = new AbortController();
  const seen: FeedEvent[] = [];
  const following = (async () => {
    for await (const event of followEvents({ baseUrl, apiKey, stream: "trip-1",
                                             signal: stop.signal })) {
      seen.push(event);
      if (seen.length === 7) stop.abort();
    }
  })();
  while (seen.length < 6) await new Promise((wait) => setTimeout(wait, 20));
  await client.POST("/streams/{stream_id}/events", {
    params: { path: { stream_id: "trip-1" } },
    body: { events: [{ type: "message.appended", data: { role: "user", content: "Thanks!" } }] },
  });
  await following;
  assert.deepEqual(seen.map((e) => e.type), ["session.started", "message.appended",
    "message.appended", "message.appended", "message.appended", "context.assembled",
    "message.appended"]);
  assert.deepEqual(seen.map((e) => e.id), [...seen.map((e) => e.id)].sort((a, b) => a - b));
});

test("a key of another scope finds nothing: 404, like a session that does not exist", async () => {
  const owner = createCtxledgerClient({ baseUrl, fetch: closing, apiKey: key("--scope", "team-x") });
  await owner.POST("/streams/{stream_id}/events", {
    params: { path: { stream_id: "secret-1" } },
    body: { events: [{ type: "session.started", data: { scope: "team-x" } }] },
  });
  const other = createCtxledgerClient({ baseUrl, fetch: closing, apiKey: key("--scope", "team-y") });
  const found = await other.GET("/sessions/{session}/state", {
    params: { path: { session: "secret-1" } } });
  const missing = await other.GET("/sessions/{session}/state", {
    params: { path: { session: "no-such-session" } } });
  assert.equal(found.response.status, 404);
  assert.equal(found.response.headers.get("content-type"), "application/problem+json");
  assert.equal(missing.response.status, 404);
  assert.deepEqual({ ...found.error, detail: undefined }, { ...missing.error, detail: undefined });
});

test("a stale expected version is a 409 naming the actual one", async () => {
  const client = createCtxledgerClient({ baseUrl, fetch: closing, apiKey: key("--scope", "team-c") });
  await client.POST("/streams/{stream_id}/events", {
    params: { path: { stream_id: "race-1" } },
    body: { events: [{ type: "session.started", data: { scope: "team-c" } }] },
  });
  const stale = await client.POST("/streams/{stream_id}/events", {
    params: { path: { stream_id: "race-1" } },
    body: { events: [{ type: "message.appended", data: { role: "user", content: "hi" } }],
            expected_version: 0 },
  });
  assert.equal(stale.response.status, 409);
  assert.match(String(stale.error?.detail), /1/);
});
