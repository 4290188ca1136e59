// The approvals inbox: every pending question, refreshed in place (a card being
// answered keeps what was typed in it), each answered with the decide update.
import { api, h, page, placeCards, questionCard, requests, showProblem } from "/static/console/console.js";

const REFRESH_MS = 2000;
const inbox = document.getElementById("inbox");
let timer = null;
// Only the newest refresh draws and sets the next (the page may start again, after a
// token is given, while one is in flight).
const latest = requests();

async function refresh() {
  clearTimeout(timer);
  const current = latest();
  try {
    const { runs } = await api("/api/approvals");
    if (!current()) return;
    const wanted = new Map();
    for (const run of runs) {
      for (const question of run.questions) wanted.set(`${run.id}\n${question.id}`, [run, question]);
      if (run.error) wanted.set(`${run.id}\nerror`, [run, null]);
    }
    placeCards(
      inbox,
      wanted,
      ([run, question]) =>
        question ? questionCard(run, question) : h("article", { class: "question" }, `${run.id}: ${run.error}`),
      // An answered card stays, showing its outcome; a question gone otherwise leaves.
      (card) => card.querySelector(".outcome.approved, .outcome.rejected") !== null,
    );
    document.getElementById("empty").hidden = inbox.children.length > 0;
    showProblem(null);
  } catch (error) {
    if (!current()) return;
    showProblem(error);
    if (error.status === 401) return;
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

page(refresh);
