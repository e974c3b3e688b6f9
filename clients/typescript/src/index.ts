/**
 * A typed client of `ctxledger serve`.
 *
 * The request and response types are generated from the service's OpenAPI document
 * (`../openapi.json`, `npm run generate`) by openapi-typescript; openapi-fetch makes the
 * calls, so a path, a parameter or a body the service does not take is a type error.
 * `followEvents` reads the live change feed (Server-Sent Events), resuming after the
 * last event it delivered when the connection drops.
 */
import createClient, { type Client, type Middleware } from "openapi-fetch";

import type { components, paths } from "./schema.js";

export type { components, paths };
export type Problem = components["schemas"]["ProblemOut"];

/** Options of {@link createCtxledgerClient}. */
export interface ClientOptions {
  /** The service's address, e.g. `http://127.0.0.1:8000`. */
  baseUrl: string;
  /** An API key from `ctxledger keys create` (sent as `Authorization: Bearer`). */
  apiKey: string;
  /** A `fetch` to use instead of the global one. */
  fetch?: typeof globalThis.fetch;
}

/** A client whose every call is typed by the service's OpenAPI document. */
export function createCtxledgerClient(options: ClientOptions): Client<paths> {
  const client = createClient<paths>({ baseUrl: options.baseUrl, fetch: options.fetch });
  const auth: Middleware = {
    onRequest({ request }) {
      request.headers.set("Authorization", `Bearer ${options.apiKey}`);
      return request;
    },
  };
  client.use(auth);
  return client;
}

/** One event of the change feed: its position (the SSE id), type and JSON data. */
export interface FeedEvent {
  id: number;
  type: string;
  data: unknown;
}

/** Options of {@link followEvents}. */
export interface FollowOptions extends ClientOptions {
  /** Deliver the events after this log position (0: from the start). */
  after?: number;
  /** Only this stream's events (else the whole log, which needs an admin key). */
  stream?: string;
  /** Stops following. */
  signal?: AbortSignal;
}

/**
 * The events after `after`, then every new one as it is appended, in position order.
 * Heartbeats are skipped; a dropped connection is opened again with `Last-Event-ID`, so
 * nothing is delivered twice or lost. Ends when `signal` aborts.
 */
export async function* followEvents(options: FollowOptions): AsyncGenerator<FeedEvent> {
  const doFetch = options.fetch ?? globalThis.fetch;
  const path = options.stream === undefined
    ? "/events/stream"
    : `/streams/${encodeURIComponent(options.stream)}/events/stream`;
  let last = options.after ?? 0;
  while (!options.signal?.aborted) {
    const response = await doFetch(`${options.baseUrl}${path}?after=${last}`, {
      headers: { Authorization: `Bearer ${options.apiKey}`, Accept: "text/event-stream",
                 "Last-Event-ID": String(last) },
      signal: options.signal,
    });
    if (!response.ok || response.body === null) {
      const problem = (await response.json().catch(() => ({}))) as Partial<Problem>;
      throw new Error(`change feed: ${response.status} ${problem.detail ?? response.statusText}`);
    }
    try {
      for await (const event of parseEvents(response.body)) {
        last = event.id;
        yield event;
      }
    } catch (error) {
      if (options.signal?.aborted) return;
      throw error;
    }
  }
}

/** The SSE messages of a body (`id:`, `event:`, `data:` lines; comments skipped). */
async function* parseEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<FeedEvent> {
  const decoder = new TextDecoder();
  let buffer = "";
  let fields: Record<string, string> = {};
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffer.search(/\r?\n/)) >= 0) {
      const line = buffer.slice(0, end);
      buffer = buffer.slice(end + (buffer[end] === "\r" ? 2 : 1));
      if (line === "") {
        if (fields.data !== undefined && fields.id !== undefined) {
          yield { id: Number(fields.id), type: fields.event ?? "message",
                  data: JSON.parse(fields.data) };
        }
        fields = {};
      } else if (!line.startsWith(":")) {
        const colon = line.indexOf(":");
        const name = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        fields[name] = name === "data" && fields.data !== undefined
          ? `${fields.data}\n${value}` : value;
      }
    }
  }
}
