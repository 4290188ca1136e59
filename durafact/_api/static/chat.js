// A chat: the conversation so far, each reply written into the page as the model
// writes it (the chat's stream: topics `messages` and `tokens`), then replaced by the
// durable reply the update returns; the memory and the transcript beside it. While a
// turn is answered, Stop ends it (the update `stop`) and "Steer this turn" sends the
// message with `steer: true`, into that turn before its next model call.
import { ApiError, api, follow, h, page, requests, showProblem } from "/static/console/console.js";

const id = document.body.dataset.id;
const path = `/api/chats/${encodeURIComponent(id)}`;
const messages = document.getElementById("messages");
const bubbles = new Map(); // message id -> {reply: element, attempt}
const mine = new Set();
let stop = null;
// The conversation so far, once it is on the page. A message sent before then is posted
// only after it: its bubbles then stay below the history, and the history read before
// the message cannot be missing it while showing it gone.
let shown = null;
// Turns are answered one at a time: a message seen while one is answered is a note
// that joined it (steer), and its reply (or error) ends it.
let answering = false;
// Each message sent reads the memory and the transcript again: only the latest is drawn.
const latestMemory = requests();

function bubble(role, text, key = null) {
  const element = h("li", { class: `bubble ${role}`, "data-key": key }, text);
  messages.append(element);
  element.scrollIntoView({ block: "nearest" });
  return element;
}

function replyTo(key) {
  if (!bubbles.has(key)) bubbles.set(key, { reply: bubble("assistant", "", key), attempt: null });
  return bubbles.get(key);
}

function showAnswering(now) {
  answering = now;
  document.getElementById("stop").hidden = !now;
  document.getElementById("steer").hidden = !now;
}

// A reply as the update returned it: `stopped` says so in its bubble.
function showReply(reply) {
  const entry = replyTo(reply.id);
  entry.reply.textContent = reply.text;
  entry.reply.classList.toggle("stopped", reply.status === "stopped");
}

function onEvent(event) {
  const item = event.data;
  if (event.name === "token") {
    const entry = replyTo(item.key);
    if (entry.attempt !== item.attempt) entry.reply.textContent = ""; // a retried call starts over
    entry.attempt = item.attempt;
    entry.reply.append(item.text);
  } else if (event.name === "message") {
    if (item.kind === "user" && !mine.has(item.key)) {
      bubble(answering ? "user note" : "user", item.text, item.key);
    }
    if (item.kind === "user") showAnswering(true);
    else if (item.kind === "reply") replyTo(item.key).reply.textContent = item.text;
    else if (item.kind === "error") replyTo(item.key).reply.textContent = `(failed: ${item.text})`;
    if (item.kind !== "user") showAnswering(false);
  } else if (event.name === "end") {
    showAnswering(false);
  }
}

function problem(error) {
  const shown = document.getElementById("send-problem");
  shown.textContent = error ? error.message : "";
  shown.hidden = !error;
}

async function send(event) {
  event.preventDefault();
  const steer = Boolean(event.submitter && event.submitter.name === "steer");
  const field = document.getElementById("text");
  const text = field.value.trim();
  if (!text) return;
  const key = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
  mine.add(key);
  field.value = "";
  const sent = bubble(steer ? "user note" : "user", text, key);
  // A note gets no reply of its own (the turn it joined answers); a message does.
  const entry = steer ? null : replyTo(key);
  if (entry) entry.reply.classList.add("writing");
  problem(null);
  try {
    await shown;
    const reply = await api(`${path}/messages`, { method: "POST", body: { text, id: key, steer } });
    if (reply.status === "steered") {
      sent.after(h("li", { class: "outcome steered", role: "status" }, reply.text));
    } else {
      sent.classList.remove("note"); // too late for the turn: answered as a message
      showReply(reply);
    }
  } catch (error) {
    if (entry) {
      entry.reply.remove();
      bubbles.delete(key);
    }
    problem(error);
  }
  if (entry) entry.reply.classList.remove("writing");
  showMemory().catch(showProblem);
}

async function stopTurn() {
  problem(null);
  try {
    showReply(await api(`${path}/stop`, { method: "POST" }));
  } catch (error) {
    problem(error);
  }
}

async function showMemory() {
  const current = latestMemory();
  const [view, page] = await Promise.all([api(`${path}/memory`), api(`${path}/transcript?limit=1000`)]);
  if (!current()) return page;
  const memory = view.memory;
  const parts = [
    h("p", {}, `${view.policy}: ${memory.window.length} messages in the window, ${memory.folded} folded, ${view.turns} turns, run ${view.runs}`),
    ...memory.summaries.map((s) => h("p", { class: "summary" }, `summary ${s.round} (messages ${s.first}-${s.last}): `, s.text)),
  ];
  if (memory.digest) parts.push(h("p", { class: "summary" }, `digest v${memory.digest.version}: `, memory.digest.text));
  document.getElementById("memory").replaceChildren(...parts);
  document.getElementById("transcript").replaceChildren(
    ...page.lines
      .filter((line) => line.content)
      .map((line) => h("li", { value: line.seq }, h("span", { class: "muted" }, `${line.role}> `), line.content)),
  );
  return page;
}

// The chat's queries are answered by its worker, which a busy (or stopped) one may not
// do within the API's query timeout: 503 NoWorkerAnswered. The first view is asked for
// again every second, with the reason shown meanwhile, until it comes.
async function firstView() {
  for (;;) {
    try {
      const transcript = await showMemory();
      showProblem(null);
      return transcript;
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 503)) throw error;
      showProblem(error);
      await new Promise((done) => setTimeout(done, 1000));
    }
  }
}

// Whether the transcript ends inside a turn: its last line is not a finished reply.
function inATurn(lines) {
  const last = lines[lines.length - 1];
  return Boolean(last) && !(last.role === "assistant" && !(last.tool_calls || []).length);
}

// The conversation so far goes above the bubbles already on the page (messages sent
// while it loaded), never in their place: replacing them would leave a reply that
// comes later writing into a bubble no longer shown. It replaces only an earlier
// history (the page starts again once a token is given).
function showHistory(transcript) {
  for (const old of messages.querySelectorAll(".history")) old.remove();
  messages.prepend(
    ...transcript.lines
      .filter((line) => (line.role === "user" || line.role === "assistant") && line.content)
      .map((line) => h("li", { class: `bubble ${line.role} history` }, line.content)),
  );
  return transcript;
}

page(async () => {
  if (stop) stop();
  document.getElementById("title").textContent = id;
  document.getElementById("send-form").onsubmit = send;
  document.getElementById("stop").onclick = stopTurn;
  shown = firstView().then(showHistory);
  const transcript = await shown;
  showAnswering(inATurn(transcript.lines));
  stop = follow(`${path}/stream`, onEvent);
});
