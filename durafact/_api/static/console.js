// What every page of the console shares: the API client (it sends the token the page
// asked for), a reader of Server-Sent Events over fetch (EventSource cannot send a
// token), and element builders that only ever write text: model and tool text is
// never parsed as markup.

const TOKEN_KEY = "durafact.token";
let restart = null;

export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

function headers(extra = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

// Every call says it is the console's (`X-Durafact: 1`): the server takes a change only
// with that header or a JSON body, which a page of another site cannot send, and a stop
// has no body.
export async function api(path, { method = "GET", body } = {}) {
  const init = { method, headers: headers({ Accept: "application/json", "X-Durafact": "1" }) };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    const error = (data && data.error) || { type: "Error", message: response.statusText };
    if (response.status === 401) askForToken();
    throw new ApiError(response.status, error.type, error.message);
  }
  return data;
}

// Requests of which only the latest counts: with `const latest = requests()`, take
// `const current = latest()` before each one; after its answer, `current()` is false
// when another was asked meanwhile. A slower answer to an earlier request (a filter
// since changed, a ledger read before the run ended) is then dropped, not drawn over
// the newer one.
export function requests() {
  let last = 0;
  return () => {
    const mine = ++last;
    return () => mine === last;
  };
}

// Follow an SSE endpoint: each event goes to `onEvent({id, name, data})`. A dropped
// connection is made again with Last-Event-ID, so nothing is missed or repeated; the
// event `end` ends it. Returns a function that stops following.
export function follow(path, onEvent) {
  let lastId = null;
  let stopped = false;
  let controller = null;
  const run = async () => {
    while (!stopped) {
      controller = new AbortController();
      try {
        const extra = { Accept: "text/event-stream" };
        if (lastId !== null) extra["Last-Event-ID"] = lastId;
        const response = await fetch(path, { headers: headers(extra), signal: controller.signal });
        if (response.status === 401) {
          askForToken();
          return;
        }
        if (response.status < 500 && !response.ok) {
          // A request that cannot succeed (an unknown run): asking again will not help.
          const data = await response.json().catch(() => null);
          showProblem(new Error((data && data.error && data.error.message) || response.statusText));
          return;
        }
        if (!response.ok) throw new Error(`${response.status}`);
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let match;
          while ((match = /\r\n\r\n|\n\n|\r\r/.exec(buffer))) {
            const event = parseEvent(buffer.slice(0, match.index));
            buffer = buffer.slice(match.index + match[0].length);
            if (!event) continue;
            if (event.id !== null) lastId = event.id;
            onEvent(event);
            if (event.name === "end") {
              stopped = true;
              controller.abort();
              return;
            }
          }
        }
      } catch (error) {
        if (stopped) return;
      }
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  };
  run();
  return () => {
    stopped = true;
    if (controller) controller.abort();
  };
}

function parseEvent(block) {
  const event = { id: null, name: "message", data: "" };
  const data = [];
  for (const line of block.split(/\r\n|\r|\n/)) {
    if (!line || line.startsWith(":")) continue;
    const at = line.indexOf(":");
    const field = at < 0 ? line : line.slice(0, at);
    const value = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
    if (field === "id") event.id = value;
    else if (field === "event") event.name = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return null;
  event.data = JSON.parse(data.join("\n"));
  return event;
}

// An element; strings among `children` become text nodes, never markup.
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (key === "class") element.className = value;
    else if (key === "href") element.setAttribute("href", safeHref(value));
    else element.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

function safeHref(value) {
  const text = String(value);
  return /^(https?:\/\/|\/)/i.test(text) ? text : "#";
}

// A run's id is one encoded path segment: it may hold '/' (a PlanReAct step's agent is
// `{run}/{step}`), which the server reads back from `%2F`. Encoded, a `..` inside an id
// is no path step; an id that is all `.` or `..` is refused when a run starts.
export const runLink = (id) => `/runs/${encodeURIComponent(id)}`;
export const runPath = (id) => `/api/runs/${encodeURIComponent(id)}`;

export function when(stamp) {
  return stamp ? new Date(stamp).toLocaleString() : "";
}

// A tool question shows the call whole, each argument as the tool will receive it: a
// long value wraps and says how long it is, and nothing of it is ever cut.
const LONG_VALUE = 200;

// Control and format characters (a right-to-left override, a zero-width space) shown as
// escapes, so a value cannot hide or reorder any part of itself; newlines stay lines.
function visible(text) {
  return text.replace(/(?!\n)[\p{Cc}\p{Cf}\u2028\u2029]/gu, (c) => `\\u${c.codePointAt(0).toString(16).padStart(4, "0")}`);
}

function callShown(question) {
  const rows = Object.entries(question.arguments).map(([name, value]) => {
    const text = visible(typeof value === "string" ? value : JSON.stringify(value, null, 2));
    const size = text.length > LONG_VALUE ? h("span", { class: "size" }, ` (${text.length} characters, all shown)`) : null;
    return [h("dt", {}, name, size), h("dd", {}, h("pre", { class: "text value" }, text))];
  });
  return h(
    "div",
    { class: "call" },
    h("p", {}, `Run ${question.tool} with these arguments, as the tool will receive them:`),
    h("dl", { class: "arguments" }, ...rows.flat()),
  );
}

export function badge(text, kind = "") {
  return h("span", { class: `badge ${kind || String(text).toLowerCase()}` }, text);
}

export function showProblem(error) {
  const problem = document.getElementById("problem");
  if (!error) {
    problem.hidden = true;
    return;
  }
  if (error instanceof ApiError && error.status === 401) return; // the token form says it
  problem.textContent = error.message || String(error);
  problem.hidden = false;
}

function askForToken() {
  const form = document.getElementById("token-form");
  form.hidden = false;
  document.querySelector("main").hidden = true;
  form.querySelector("input").focus();
}

// Run the page's `start` once the token (if the API asks for one) is known.
export function page(start) {
  restart = start;
  const form = document.getElementById("token-form");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, form.querySelector("input").value.trim());
    form.hidden = true;
    document.querySelector("main").hidden = false;
    showProblem(null);
    restart().catch(showProblem);
  });
  start().catch(showProblem);
}

// What an answer to a tool question may remember (the `remember` scopes it takes).
const REMEMBERED = {
  call: "this call (the same tool and arguments)",
  tool: "this tool, in this run",
  chat: "this tool, in this chat",
};

// A question that waits for a person, with the form that answers it (the decide
// update): approve (a budget question: with new limits, or none to extend it by its
// first budget), or reject with a reason and corrected facts; a tool question's answer
// may be remembered, in the scopes it takes.
// Cards changed in place, by `data-key`: a card still wanted stays as it is, with what a
// person is typing in it (and where); one no longer wanted leaves, unless `stays(card)`;
// a new one, `make(value)` for its entry of `wanted` (key -> value), is appended.
export function placeCards(container, wanted, make, stays = () => false) {
  const present = new Set();
  for (const card of [...container.children]) {
    if (wanted.has(card.dataset.key)) present.add(card.dataset.key);
    else if (!stays(card)) card.remove();
  }
  for (const [key, value] of wanted) {
    if (present.has(key)) continue;
    const card = make(value);
    card.dataset.key = key;
    container.append(card);
  }
}

export function questionCard(run, question, onAnswered) {
  const facts = run.correctable.map((name) =>
    h("label", {}, name, h("input", { name: `fact:${name}`, autocomplete: "off" })),
  );
  const limits = (question.settable || []).map((name) =>
    h("label", {}, name, h("input", { name: `set:${name}`, autocomplete: "off" })),
  );
  const scopes = question.remember || [];
  const choice = (value, label) =>
    h(
      "label",
      { class: "check" },
      h("input", { type: "radio", name: "remember", value, checked: value === "" }),
      label,
    );
  const outcome = h("p", { class: "outcome", role: "status" });
  const form = h(
    "form",
    { class: "answer" },
    // Named for its action: a run's page also has the reason to cancel it.
    h("label", {}, "Reason for approving or rejecting", h("textarea", { name: "reason", rows: 2 })),
    facts.length
      ? h("fieldset", {}, h("legend", {}, "Corrected facts (with a rejection)"), facts)
      : null,
    limits.length
      ? h("fieldset", {}, h("legend", {}, "New limits (with an approval; empty: extend)"), limits)
      : null,
    scopes.length
      ? h(
          "fieldset",
          { class: "remember" },
          h("legend", {}, "Remember the answer for"),
          choice("", "no later call"),
          scopes.map((scope) => choice(scope, REMEMBERED[scope] || scope)),
        )
      : null,
    h(
      "div",
      { class: "buttons" },
      h("button", { type: "submit", name: "approve", value: "1" }, "Approve"),
      h("button", { type: "submit", name: "reject", value: "0", class: "reject" }, "Reject"),
    ),
    outcome,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const approved = event.submitter && event.submitter.name === "approve";
    const given = (prefix) => {
      const values = {};
      for (const input of form.querySelectorAll(`input[name^='${prefix}']`)) {
        if (input.value.trim()) values[input.name.slice(prefix.length)] = input.value.trim();
      }
      return values;
    };
    const reason = form.elements.reason.value;
    const changes = approved ? given("set:") : given("fact:");
    const remember = form.elements.remember ? form.elements.remember.value || null : null;
    const body = { approved, reason, changes, remember, by: "web console" };
    for (const button of form.querySelectorAll("button")) button.disabled = true;
    try {
      const path = `${runPath(run.id)}/approvals/${encodeURIComponent(question.id)}`;
      const answer = await api(path, { method: "POST", body });
      const edits = Object.keys(answer.changes).length
        ? ` (${answer.approved ? "set" : "corrected"}: ${Object.entries(answer.changes).map(([k, v]) => `${k}=${v}`).join(", ")})`
        : "";
      const kept = answer.remember ? `, remembered for ${REMEMBERED[answer.remember]}` : "";
      outcome.textContent = `${answer.approved ? "Approved" : "Rejected"}${edits}${kept}`;
      outcome.className = `outcome ${answer.approved ? "approved" : "rejected"}`;
      if (onAnswered) onAnswered(answer);
    } catch (error) {
      outcome.textContent = error.message;
      outcome.className = "outcome refused";
      for (const button of form.querySelectorAll("button")) button.disabled = false;
    }
  });
  const kind =
    question.kind === "escalate"
      ? badge(`escalation: ${question.escalates || "an earlier question"} timed out`, "escalate")
      : badge(question.n > 1 ? `asked again (${question.n})` : "approval", "approve");
  return h(
    "article",
    { class: "question", "data-question": question.id },
    h("header", {}, h("a", { href: runLink(run.id) }, run.id), " ", kind),
    run.summary ? h("p", { class: "summary" }, run.summary) : null,
    h("p", { class: "qid" }, question.id),
    question.arguments ? callShown(question) : h("pre", { class: "text" }, question.text),
    question.rule ? h("p", { class: "rule" }, `asked by: ${question.rule}`) : null,
    form,
  );
}
