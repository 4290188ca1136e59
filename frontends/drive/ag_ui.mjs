// Drives durafact's AG-UI endpoints with @ag-ui/client's own HttpAgent.
//
//   node ag_ui.mjs SPEC_JSON
//
// SPEC: {url, token, threadId, runs: [{message?, forwardedProps?, answer?, expectError?}]}.
// Each run is one `runAgent` on the same agent (so the same thread, with the messages it
// holds): `message` is added as a user message first; `answer` ({approved, reason}, or
// "cancel") answers every interrupt the last run ended with, as `resume`.
//
// Prints one JSON value a line: {run, event, ms} for every event on the wire (ms since
// the POST), then {run, done: {result, messages, state, pendingInterrupts}}, or
// {run, error, status} when the run failed. Every event on the wire is checked against
// @ag-ui/core's schema, unknown fields included: one that does not fit ends the program
// with exit code 1, as does a run the client rejects (unless `expectError`).
import { HttpAgent, randomUUID } from "@ag-ui/client";
import { EventSchema } from "@ag-ui/core/schemas";

const spec = JSON.parse(process.argv[2]);
const print = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);

function canonical(value) {
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === "object") {
    return Object.fromEntries(
      Object.keys(value)
        .filter((key) => value[key] !== undefined)
        .sort()
        .map((key) => [key, canonical(value[key])]),
    );
  }
  return value;
}

// An event that fails the schema, or loses a field to it (an unknown one), is a violation.
function check(raw) {
  const parsed = EventSchema.safeParse(raw);
  if (!parsed.success) return JSON.stringify(parsed.error.issues);
  const kept = JSON.stringify(canonical(parsed.data));
  return kept === JSON.stringify(canonical(raw)) ? null : `fields dropped: ${kept}`;
}

let current = 0;
let sentAt = 0;
let wire = Promise.resolve();

// The wire itself: the response body is read twice, once by the client, once here.
async function watchingFetch(url, init) {
  sentAt = performance.now();
  const response = await fetch(url, init);
  if (!response.ok || !response.body) return response;
  const [mine, theirs] = response.body.tee();
  const run = current;
  wire = (async () => {
    const decoder = new TextDecoder();
    let buffer = "";
    for await (const bytes of mine) {
      buffer += decoder.decode(bytes, { stream: true });
      const blocks = buffer.split("\n\n");
      buffer = blocks.pop();
      for (const block of blocks) {
        const data = block
          .split("\n")
          .filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).replace(/^ /, ""));
        if (!data.length) continue;
        const event = JSON.parse(data.join("\n"));
        const ms = Math.round(performance.now() - sentAt);
        print({ run, event, ms });
        const problem = check(event);
        if (problem) {
          process.stderr.write(`event ${event.type} breaks the schema: ${problem}\n`);
          process.exit(1);
        }
      }
    }
  })();
  return new Response(theirs, { status: response.status, headers: response.headers });
}

const agent = new HttpAgent({
  url: spec.url,
  headers: spec.token ? { Authorization: `Bearer ${spec.token}` } : {},
  threadId: spec.threadId,
  fetch: watchingFetch,
});

for (const [index, step] of spec.runs.entries()) {
  current = index;
  if (step.message) {
    agent.addMessage({ id: randomUUID(), role: "user", content: step.message });
  }
  const parameters = { forwardedProps: step.forwardedProps ?? {} };
  if (step.answer) {
    const answer = step.answer;
    parameters.resume = agent.pendingInterrupts.map((interrupt) =>
      answer === "cancel"
        ? { interruptId: interrupt.id, status: "cancelled" }
        : { interruptId: interrupt.id, status: "resolved", payload: answer },
    );
  }
  try {
    const { result } = await agent.runAgent(parameters);
    await wire;
    print({
      run: index,
      done: {
        result: result ?? null,
        messages: agent.messages,
        state: agent.state,
        pendingInterrupts: agent.pendingInterrupts,
      },
    });
  } catch (error) {
    await wire.catch(() => {});
    print({ run: index, error: String(error.message ?? error), status: error.status ?? null });
    if (!step.expectError) process.exit(1);
  }
}
