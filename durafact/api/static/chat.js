// A chat: the conversation so far, each reply written into the page as the model
// writes it (the chat's stream: topics `messages` and `tokens`), then replaced by the
// durable reply the update returns; the memory and the transcript beside it.
import { api, follow, h, page, showProblem } from "/static/console/console.js";

const id = document.body.dataset.id;
const path = `/api/chats/${encodeURIComponent(id)}`;
const messages = document.getElementById("messages");
const bubbles = new Map(); // message id -> {reply: element, attempt}
const mine = new Set();
let stop = null;

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

function onEvent(event) {
  const item = event.data;
  if (event.name === "token") {
    const entry = replyTo(item.key);
    if (entry.attempt !== item.attempt) entry.reply.textContent = ""; // a retried call starts over
    entry.attempt = item.attempt;
    entry.reply.append(item.text);
  } else if (event.name === "message") {
    if (item.kind === "user" && !mine.has(item.key)) bubble("user", item.text, item.key);
    else if (item.kind === "reply") replyTo(item.key).reply.textContent = item.text;
    else if (item.kind === "error") replyTo(item.key).reply.textContent = `(failed: ${item.text})`;
  }
}

async function send(event) {
  event.preventDefault();
  const field = document.getElementById("text");
  const text = field.value.trim();
  if (!text) return;
  const key = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
  mine.add(key);
  field.value = "";
  bubble("user", text, key);
  const entry = replyTo(key);
  entry.reply.classList.add("writing");
  const problem = document.getElementById("send-problem");
  problem.hidden = true;
  try {
    const reply = await api(`${path}/messages`, { method: "POST", body: { text, id: key } });
    entry.reply.textContent = reply.text;
  } catch (error) {
    entry.reply.remove();
    bubbles.delete(key);
    problem.textContent = error.message;
    problem.hidden = false;
  }
  entry.reply.classList.remove("writing");
  showMemory().catch(showProblem);
}

async function showMemory() {
  const [view, page] = await Promise.all([api(`${path}/memory`), api(`${path}/transcript?limit=1000`)]);
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

page(async () => {
  if (stop) stop();
  document.getElementById("title").textContent = id;
  document.getElementById("send-form").onsubmit = send;
  const transcript = await showMemory();
  messages.replaceChildren(
    ...transcript.lines
      .filter((line) => (line.role === "user" || line.role === "assistant") && line.content)
      .map((line) => h("li", { class: `bubble ${line.role}` }, line.content)),
  );
  stop = follow(`${path}/stream`, onEvent);
});
