// The approvals inbox: every pending question, refreshed in place (a card being
// answered keeps what was typed in it), each answered with the decide update.
import { api, h, page, questionCard, showProblem } from "/static/console/console.js";

const REFRESH_MS = 2000;
const inbox = document.getElementById("inbox");
let timer = null;

async function refresh() {
  clearTimeout(timer);
  try {
    const { runs } = await api("/api/approvals");
    const wanted = new Map();
    for (const run of runs) {
      for (const question of run.questions) wanted.set(`${run.id}\n${question.id}`, [run, question]);
      if (run.error) wanted.set(`${run.id}\nerror`, [run, null]);
    }
    for (const card of [...inbox.children]) {
      // An answered card stays, showing its outcome; a question gone otherwise leaves.
      if (!wanted.has(card.dataset.key) && !card.querySelector(".outcome.approved, .outcome.rejected")) {
        card.remove();
      }
    }
    const present = new Set([...inbox.children].map((card) => card.dataset.key));
    for (const [key, [run, question]] of wanted) {
      if (present.has(key)) continue;
      const card = question
        ? questionCard(run, question)
        : h("article", { class: "question" }, `${run.id}: ${run.error}`);
      card.dataset.key = key;
      inbox.append(card);
    }
    document.getElementById("empty").hidden = inbox.children.length > 0;
    showProblem(null);
  } catch (error) {
    showProblem(error);
    if (error.status === 401) return;
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

page(refresh);
