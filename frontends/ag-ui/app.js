// A recipe run on durafact with AG-UI's HttpAgent: its steps, tool calls and answer as
// they come, its state, and Approve/Reject when it asks a person. The thread is the
// page's `?thread=` (the workflow id): reload the page and it attaches to the run.
// Served at /ag-ui by `DURAFACT_API_TOKEN=... node frontends/serve.mjs DURAFACT_URL`,
// which bundles it with esbuild and adds the token to its /api/ag-ui requests.
import { HttpAgent, randomUUID } from "@ag-ui/client";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const agent = new HttpAgent({ url: "/api/ag-ui/runs", threadId: params.get("thread") ?? undefined });

function show(kind, text) {
  const line = Object.assign(document.createElement("li"), { className: kind, textContent: text });
  $("log").append(line);
  return line;
}

let writing;
const subscriber = {
  onStepStartedEvent: ({ event }) => void show("step", `step: ${event.stepName}`),
  onTextMessageStartEvent: () => void (writing = show("text", "")),
  onTextMessageContentEvent: ({ event }) => void (writing.textContent += event.delta),
  onToolCallEndEvent: ({ toolCallName, toolCallArgs }) =>
    void show("tool", `${toolCallName} ${JSON.stringify(toolCallArgs)}`),
  onToolCallResultEvent: ({ event }) => void show("tool", `→ ${event.content}`),
  onMessagesSnapshotEvent: ({ event }) => {
    for (const m of event.messages) if (typeof m.content === "string") show(m.role, m.content);
  },
  onStateChanged: ({ state }) => void ($("state").textContent = JSON.stringify(state, null, 2)),
  onRunFinishedEvent: (finished) => {
    $("question").hidden = finished.outcome !== "interrupt";
    if (finished.outcome === "interrupt") $("asked").textContent = finished.interrupts[0].message;
    else show("done", "finished");
  },
  onRunErrorEvent: ({ event }) => void show("error", event.message),
};

async function run(parameters) {
  await agent.runAgent(parameters, subscriber).catch((error) => show("error", String(error)));
}

$("start").onsubmit = (event) => {
  event.preventDefault();
  agent.addMessage({ id: randomUUID(), role: "user", content: $("goal").value });
  show("user", $("goal").value);
  history.replaceState(null, "", `?thread=${agent.threadId}`);
  run({ forwardedProps: { recipe: $("recipe").value } });
};

const answer = (approved) => () => {
  $("question").hidden = true;
  const resume = agent.pendingInterrupts.map((interrupt) => ({
    interruptId: interrupt.id,
    status: "resolved",
    payload: { approved, reason: approved ? "approved on the page" : "rejected on the page" },
  }));
  run({ resume });
};
$("approve").onclick = answer(true);
$("reject").onclick = answer(false);

if (params.get("thread")) run({}); // a thread given: attach, and see what it said so far
