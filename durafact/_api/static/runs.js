// The runs page: a list from visibility that refreshes itself, filtered by recipe,
// status and state, and a form that starts any registered recipe.
import { api, badge, h, page, requests, runLink, showProblem, when } from "/static/console/console.js";

const REFRESH_MS = 2000;
const filters = ["type", "status", "state"].map((id) => document.getElementById(id));
let pageSize = 50;
let timer = null;
let recipes = [];
// A filter changed while a refresh was in flight: only the newest list is drawn, and
// only the newest refresh sets the next one (two would each keep refreshing).
const latest = requests();

// A run's row. Each cell is named for its column (class, data-label): on a phone the
// table shows a card a run, each fact under its name (console.css), as seven columns
// do not fit 390 px.
function row(run) {
  const cells = [
    ["Run", h("a", { href: runLink(run.id) }, run.id)],
    ["Recipe", run.recipe || run.type],
    ["Status", run.status ? badge(run.status) : ""],
    ["State", badge(run.state)],
    ["Started", when(run.started_at)],
    // DurafactTokens and DurafactCost, as of the run's last phase.
    ["Tokens", run.tokens == null ? "" : run.tokens.toLocaleString("en")],
    // No DurafactCost: nothing was priced, or not every call was (the run's page says).
    ["Cost", run.cost == null ? "" : String(run.cost)],
  ];
  return h(
    "tr",
    { "data-id": run.id },
    cells.map(([label, value]) => h("td", { class: label.toLowerCase(), "data-label": label }, value)),
  );
}

async function refresh() {
  clearTimeout(timer);
  const current = latest();
  const query = new URLSearchParams({ page_size: String(pageSize) });
  for (const input of filters) if (input.value.trim()) query.set(input.id, input.value.trim());
  try {
    const found = await api(`/api/runs?${query}`);
    if (!current()) return;
    const body = document.querySelector("#runs tbody");
    body.replaceChildren(...found.runs.map(row));
    document.getElementById("none").hidden = found.runs.length > 0;
    document.getElementById("more").hidden = !found.next_page_token || pageSize >= 200;
    showProblem(null);
  } catch (error) {
    if (!current()) return;
    showProblem(error);
    if (error.status === 401) return;
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

function showSchema() {
  const recipe = recipes.find((r) => r.type === document.getElementById("start-type").value);
  const schema = recipe && recipe.input_schema;
  const fields = schema && schema.properties ? Object.keys(schema.properties) : [];
  const required = (schema && schema.required) || [];
  document.getElementById("schema").textContent = schema
    ? `${schema.title || "input"}: ${fields.map((f) => (required.includes(f) ? `${f}*` : f)).join(", ")}`
    : "takes no input";
}

async function startRun(event) {
  event.preventDefault();
  const problem = document.getElementById("start-problem");
  problem.hidden = true;
  const text = document.getElementById("start-input").value.trim();
  const body = { type: document.getElementById("start-type").value };
  const id = document.getElementById("start-id").value.trim();
  if (id) body.id = id;
  try {
    if (text) body.input = JSON.parse(text);
    const started = await api("/api/runs", { method: "POST", body });
    window.location.assign(runLink(started.id));
  } catch (error) {
    problem.textContent = error.message;
    problem.hidden = false;
  }
}

page(async () => {
  recipes = await api("/api/recipes");
  const options = () => recipes.map((r) => h("option", { value: r.type }, `${r.type} (${r.recipe})`));
  document.getElementById("type").replaceChildren(h("option", { value: "" }, "all"), ...options());
  document.getElementById("start-type").replaceChildren(...options());
  // Handlers as properties: a start run again (after the token was given) sets them once.
  document.getElementById("start-type").onchange = showSchema;
  document.getElementById("start-form").onsubmit = startRun;
  for (const input of filters) input.onchange = refresh;
  document.getElementById("more").onclick = () => {
    pageSize = Math.min(pageSize + 50, 200);
    refresh();
  };
  showSchema();
  await refresh();
});
