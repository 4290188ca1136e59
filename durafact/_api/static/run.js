// A run's page: its status, live progress (SSE, resumed with Last-Event-ID), the
// questions it waits on, a PlanReAct run's step agents, Cancel with a reason, a note to
// a running agent (the update `steer`), and once it ends the result, the artifacts and
// the provenance trees from the result down to its sources, and "Fork from here" on an
// artifact a fork may change (`durafact fork`: a new run that reruns what depends on it).
import {
  api,
  badge,
  follow,
  h,
  page,
  placeCards,
  questionCard,
  requests,
  runLink,
  runPath,
  showProblem,
  when,
} from "/static/console/console.js";

const id = document.body.dataset.id;
const $ = (name) => document.getElementById(name);
const MAX_TREES = 3;
let artifacts = new Map();
let stop = null;
let refreshing = null;
// The ledger read as the page opens, while the run runs, may come back after the one
// read at its end: only the latest ledger and trees asked for are drawn.
const latestLedger = requests();
const latestTrees = requests();

function fact(term, value) {
  return value === null || value === undefined || value === ""
    ? []
    : [h("dt", {}, term), h("dd", {}, value)];
}

// A usage leaves out what is zero (its tokens, its cost). A cost of null without a
// currency: nothing was priced (no worker had a price table), so none is shown; with
// one, not every call was priced, as `durafact status` says.
function usageText(usage) {
  const tokens = `${(usage.total_tokens || 0).toLocaleString("en")} tokens`;
  if (usage.cost === null) {
    return usage.currency ? `${tokens}; cost unknown (not every call was priced)` : tokens;
  }
  return `${tokens}; cost ${"cost" in usage ? usage.cost : "0"} ${usage.currency || ""}`.trim();
}

async function refresh() {
  const run = await api(runPath(id));
  $("title").textContent = run.id;
  $("summary").textContent = run.summary || "";
  const usage = run.usage ? usageText(run.usage) : null;
  $("facts").replaceChildren(
    ...fact("State", badge(run.state)),
    ...fact("Status", run.recipe_status || run.status ? badge(run.recipe_status || run.status) : null),
    ...fact("Recipe", `${run.recipe || ""} (${run.type})`),
    ...fact("Started", when(run.started_at)),
    ...fact("Closed", when(run.closed_at)),
    ...fact("Usage", usage),
  );
  $("ui-link").setAttribute("href", run.ui_url);
  $("cancel-form").hidden = run.state !== "RUNNING";
  $("steer-card").hidden = !(run.state === "RUNNING" && run.takes_notes);
  $("troubles").replaceChildren(...run.troubles.map((line) => h("li", {}, line)));
  $("questions-card").hidden = run.questions.length === 0;
  // A question still pending keeps its card, and with it what a person is typing there.
  placeCards($("questions"), new Map(run.questions.map((q) => [q.id, q])), (q) => questionCard(run, q));
  // A PlanReAct run's agents, one per step so far: each opens its own page.
  $("agents-card").hidden = run.agents.length === 0;
  $("agents").replaceChildren(
    ...run.agents.map((agent) =>
      h(
        "li",
        { "data-id": agent.id },
        h("a", { href: runLink(agent.id) }, agent.id),
        " ",
        badge(agent.state),
        agent.status ? [" ", badge(agent.status)] : null,
      ),
    ),
  );
  if (run.answer !== null || run.failure) showResult(run);
  return run;
}

// One refresh at a time, and one more if events came in meanwhile.
function refreshSoon() {
  if (refreshing) {
    refreshing.again = true;
    return;
  }
  refreshing = { again: false };
  refresh()
    .catch(showProblem)
    .finally(() => {
      const again = refreshing.again;
      refreshing = null;
      if (again) refreshSoon();
    });
}

// The answer as `durafact result` prints it (the API's `answer`: the recipe's own text).
function showResult(run) {
  $("result-card").hidden = false;
  const text = run.failure ? `Ended without a result: ${run.failure}` : run.answer;
  $("answer").replaceChildren(text ? h("p", { class: run.failure ? "problem" : "" }, text) : "");
  $("result").textContent = JSON.stringify(run.result, null, 2);
}

function onEvent(event) {
  if (event.name === "end") {
    refreshSoon();
    loadArtifacts().catch(showProblem);
    return;
  }
  const item = event.data;
  $("progress").append(
    h("li", { class: `kind-${item.kind}` }, badge(item.status, "status"), " ", item.message),
  );
  if (event.name !== "progress") refreshSoon();
  // What a question is about (a report, a tool call) is in the ledger: show it with it.
  if (event.name === "question") loadArtifacts().catch(quiet);
}

async function loadArtifacts() {
  const current = latestLedger();
  const ledger = await api(`${runPath(id)}/artifacts`);
  if (!current()) return;
  artifacts = new Map(ledger.artifacts.map((a) => [a.id, a]));
  const out = new Map();
  for (const link of ledger.links) {
    if (!out.has(link.source)) out.set(link.source, []);
    out.get(link.source).push(link);
  }
  $("artifacts-card").hidden = ledger.artifacts.length === 0;
  // Drawn again when a running run ends: what a person opened stays open.
  const opened = new Set([...$("artifacts").querySelectorAll("details[open]")].map((d) => d.dataset.id));
  $("artifacts").replaceChildren(
    ...ledger.artifacts.map((a) =>
      h(
        "details",
        { class: "artifact", "data-id": a.id, open: opened.has(a.id) },
        h("summary", {}, a.id, " ", h("span", { class: "muted" }, `${a.type} v${a.version}`)),
        h("pre", { class: "text" }, a.text),
        ...(out.get(a.id) || []).map((l) => h("p", { class: "link" }, `${l.relation} → ${l.target}`)),
        out.has(a.id)
          ? h("button", { type: "button", onclick: () => showTree(a.id).catch(showProblem) }, "What it rests on")
          : null,
        a.fork_value === null || a.fork_value === undefined ? null : forkFrom(a),
      ),
    ),
  );
  // The trees start where nothing points: the newest first (the answer, the reply),
  // before, say, search results nobody chose.
  const targets = new Set(ledger.links.map((l) => l.target));
  const roots = ledger.artifacts
    .map((a) => a.id)
    .filter((a) => out.has(a) && !targets.has(a))
    .reverse()
    .slice(0, MAX_TREES);
  await showTrees(roots);
}

// The provenance trees of `artifactIds`, each from the artifact down to what it rests on.
async function showTrees(artifactIds) {
  const current = latestTrees();
  const trees = await Promise.all(
    artifactIds.map((a) => api(`${runPath(id)}/provenance/${encodeURIComponent(a)}`)),
  );
  if (!current()) return;
  $("provenance-card").hidden = trees.length === 0;
  $("provenance").replaceChildren(...trees.map((view) => h("ul", { class: "tree" }, node(view.tree))));
  $("artifact-text").hidden = true;
}

// The tree a person asked for, brought into view. Only then: the trees the page loads by
// itself (often just one) must not scroll it away from the run's status.
async function showTree(artifactId) {
  await showTrees([artifactId]);
  $("provenance-card").scrollIntoView({ block: "start" });
}

function node(tree) {
  const label = h(
    "button",
    { type: "button", class: "node", onclick: () => read(tree.id) },
    tree.relation ? h("span", { class: "relation" }, `${tree.relation} → `) : "",
    tree.id,
    " ",
    h("span", { class: "muted" }, `(${tree.type})`),
  );
  const children = tree.children.length ? h("ul", {}, tree.children.map(node)) : null;
  return h("li", { "data-artifact": tree.id }, label, children);
}

// "Fork from here": the artifact's value (its text, else its JSON) to edit, and a button
// that starts the fork (POST /api/runs/{id}/fork) and opens its page.
function forkFrom(artifact) {
  const value = h("textarea", { rows: 3, "aria-label": `New value of ${artifact.id}` });
  value.value = artifact.fork_value;
  const outcome = h("p", { class: "outcome", role: "status" });
  const form = h(
    "form",
    {
      class: "steer-form",
      hidden: true,
      onsubmit: (event) => startFork(event, artifact.id, value, outcome),
    },
    value,
    h("div", { class: "buttons" }, h("button", { type: "submit" }, "Start the fork")),
    outcome,
  );
  const open = h("button", { type: "button" }, "Fork from here");
  open.addEventListener("click", () => {
    form.hidden = false;
    open.hidden = true;
    value.focus();
  });
  return h("div", { class: "fork" }, open, form);
}

async function startFork(event, artifactId, value, outcome) {
  event.preventDefault();
  const button = event.target.querySelector("button");
  button.disabled = true;
  outcome.className = "outcome";
  outcome.textContent = "Starting the fork…";
  try {
    const body = { set: { [artifactId]: value.value } };
    const forked = await api(`${runPath(id)}/fork`, { method: "POST", body });
    location.assign(runLink(forked.id));
  } catch (error) {
    outcome.textContent = error.message;
    outcome.className = "outcome refused";
    button.disabled = false;
  }
}

function read(artifactId) {
  const artifact = artifacts.get(artifactId);
  $("artifact-text").hidden = false;
  $("artifact-text").textContent = artifact ? `${artifact.id}\n\n${artifact.text}` : artifactId;
}

async function cancel(event) {
  event.preventDefault();
  const reason = $("cancel-reason").value.trim() || "cancelled in the console";
  try {
    await api(`${runPath(id)}/cancel`, { method: "POST", body: { reason } });
    refreshSoon();
  } catch (error) {
    showProblem(error);
  }
}

// The update `steer`: answered as soon as the run accepted the note, which then waits
// for the agent's next model call (the progress shows it go in, announced as `steer`).
async function steer(event) {
  event.preventDefault();
  const form = $("steer-form");
  const outcome = $("steer-outcome");
  const button = form.querySelector("button");
  button.disabled = true;
  outcome.className = "outcome";
  outcome.textContent = "Sending the note…";
  try {
    const queued = await api(`${runPath(id)}/steer`, { method: "POST", body: { text: $("note").value } });
    const whose = queued.id === id ? "" : ` of the step's agent ${queued.id}`;
    const before = queued.turn ? `turn ${queued.turn}` : "its next model call";
    outcome.textContent = `Queued: the note goes before ${before}${whose}`;
    outcome.className = "outcome approved";
    $("note").value = "";
  } catch (error) {
    outcome.textContent = error.message;
    outcome.className = "outcome refused";
  }
  button.disabled = false;
}

page(async () => {
  if (stop) stop();
  $("progress").replaceChildren();
  $("cancel-form").onsubmit = cancel;
  $("steer-form").onsubmit = steer;
  const run = await refresh();
  stop = follow(`${runPath(id)}/events`, onEvent);
  // A running run's ledger so far. An ended run's is read once, when the end comes: its
  // stream sends it at once, and each read of a closed run's ledger is a worker's replay.
  if (run.state === "RUNNING") loadArtifacts().catch(quiet);
});

// The ledger so far, when a worker answers for it; else it comes with the run's end.
function quiet() {}
