// The example front ends on one small server of your own, in front of `durafact serve`:
//
//   DURAFACT_API_TOKEN=... node frontends/serve.mjs http://127.0.0.1:8000 [PORT]
//
// It bundles each example page with esbuild at start, serves it, and passes the
// protocol routes (/api/ai-sdk/..., /api/ag-ui/...) on to durafact with the token, so
// the browser never holds the token. A page reaches durafact only through here, as its
// own origin: a request another site's page sends is refused here, as durafact itself
// refuses one (its Origin and Sec-Fetch-Site checks see this server, not the page).
import http from "node:http";
import { readFile } from "node:fs/promises";
import { build } from "esbuild";

const here = new URL(".", import.meta.url).pathname;
const [api, port = "5173"] = process.argv.slice(2);
if (!api) {
  console.error("usage: node frontends/serve.mjs DURAFACT_URL [PORT]");
  process.exit(2);
}
const token = process.env.DURAFACT_API_TOKEN;

const pages = {
  "/": { html: "usechat/index.html", script: "/usechat.js", entry: "usechat/app.jsx" },
  "/ag-ui": { html: "ag-ui/index.html", script: "/ag-ui.js", entry: "ag-ui/app.js" },
};
const files = {};
for (const page of Object.values(pages)) {
  try {
    files[page.html] = await readFile(here + page.html);
  } catch {
    continue; // an example not written yet
  }
  const bundled = await build({
    entryPoints: [here + page.entry],
    bundle: true,
    write: false,
    format: "esm",
    jsx: "automatic",
    minify: true,
    define: { "process.env.NODE_ENV": '"production"' },
    logLevel: "error",
  });
  files[page.script] = bundled.outputFiles[0].contents;
}

const PROTOCOLS = /^\/api\/(ai-sdk|ag-ui)\//;
const server = http.createServer((request, response) => {
  const path = new URL(request.url, "http://here").pathname;
  const page = pages[path];
  if (request.method === "GET" && page && files[page.html]) {
    response.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
    return response.end(files[page.html]);
  }
  if (request.method === "GET" && files[path]) {
    response.writeHead(200, { "Content-Type": "text/javascript; charset=utf-8" });
    return response.end(files[path]);
  }
  if (!PROTOCOLS.test(path)) {
    response.writeHead(404);
    return response.end();
  }
  const site = request.headers["sec-fetch-site"];
  if (site !== undefined && site !== "same-origin") {
    response.writeHead(403, { "Content-Type": "application/json" });
    return response.end(JSON.stringify({ error: { type: "CrossSiteRequest", message: "refused" } }));
  }
  const headers = { ...request.headers };
  for (const name of ["host", "origin", "referer", "cookie", "sec-fetch-site", "sec-fetch-mode"]) {
    delete headers[name];
  }
  if (token) headers.authorization = `Bearer ${token}`;
  const upstream = http.request(new URL(request.url, api), { method: request.method, headers }, (answer) => {
    response.writeHead(answer.statusCode, answer.headers);
    answer.pipe(response);
  });
  upstream.on("error", (error) => {
    response.writeHead(502, { "Content-Type": "application/json" });
    response.end(JSON.stringify({ error: { type: "BadGateway", message: String(error) } }));
  });
  request.pipe(upstream);
  response.on("close", () => upstream.destroy()); // a page that leaves costs nothing
});
server.listen(Number(port), "127.0.0.1", () => {
  console.log(`http://127.0.0.1:${server.address().port}`);
});
