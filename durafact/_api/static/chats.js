// The chats page: start a chat with its memory policy and tools, or open a running one.
import { api, h, page, when } from "/static/console/console.js";

async function start(event) {
  event.preventDefault();
  const tools = document.getElementById("tools").value.split(",").map((t) => t.trim());
  const settings = {
    memory: { kind: document.getElementById("memory").value },
    tools: tools.filter(Boolean),
    stream: document.getElementById("stream").checked,
  };
  try {
    const chat = await api("/api/chats", { method: "POST", body: { settings } });
    window.location.assign(`/chats/${encodeURIComponent(chat.id)}`);
  } catch (error) {
    const problem = document.getElementById("chat-problem");
    problem.textContent = error.message;
    problem.hidden = false;
  }
}

page(async () => {
  document.getElementById("new-chat").onsubmit = start;
  // The running runs of every recipe that declares itself a chat (the ready ChatWorkflow).
  const chatTypes = (await api("/api/recipes")).filter((recipe) => recipe.chat);
  const pages = await Promise.all(
    chatTypes.map((recipe) => api(`/api/runs?type=${encodeURIComponent(recipe.type)}&state=RUNNING`)),
  );
  const runs = pages.flatMap((page) => page.runs);
  document.getElementById("chats").replaceChildren(
    ...runs.map((run) =>
      h("li", {}, h("a", { href: `/chats/${encodeURIComponent(run.id)}` }, run.id), " ", when(run.started_at)),
    ),
  );
  document.getElementById("none").hidden = runs.length > 0;
});
