// The Optimize dashboard: a hash-routed page over the server's typed API. Every request carries the API token
// the user signed in with (kept in this tab's sessionStorage); what is shown is what that token may read.

const TOKEN = "optimize.token";
const main = document.getElementById("main");
let leaving = [];  // what the current view holds open (streams, timers), ended when the view changes

// --- DOM --------------------------------------------------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function show(...nodes) {
  main.replaceChildren(...nodes);
  main.focus({ preventScroll: true });
}

function notice(text) {
  const box = document.getElementById("notice");
  box.textContent = text;
  box.hidden = false;
  clearTimeout(notice.timer);
  notice.timer = setTimeout(() => { box.hidden = true; }, 5000);
}

const short = (id) => (id || "").slice(0, 12);
const fmt = (value, digits = 4) => (typeof value === "number" ? Number(value.toPrecision(digits)).toString() : "—");

function age(iso) {
  if (!iso) return "—";
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return `${Math.round(seconds)}s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} d ago`;
}

function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.filter(([, v]) => v !== undefined).map(([k, v]) =>
    h("div", {}, h("dt", {}, k), h("dd", {}, v ?? "—"))));
}

// --- the API ----------------------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    super(body?.detail || body?.error?.message || `HTTP ${status}`);
    this.status = status;
    this.hint = body?.hint;
  }
}

async function api(path, { method = "GET", body, token } = {}) {
  const headers = { Authorization: `Bearer ${token || sessionStorage.getItem(TOKEN)}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (response.status === 401 && !token) {
    signOut("Your token is no longer accepted; sign in again.");
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

// A status stream (server-sent events) read with fetch, so that it carries the token as every other request.
async function follow(path, onStatus) {
  const stop = new AbortController();
  leaving.push(() => stop.abort());
  try {
    const response = await fetch(path, { headers: { Authorization: `Bearer ${sessionStorage.getItem(TOKEN)}` },
                                         signal: stop.signal });
    if (!response.ok) return;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let held = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      held += decoder.decode(value, { stream: true });
      let end;
      while ((end = held.indexOf("\n\n")) >= 0) {
        const block = held.slice(0, end);
        held = held.slice(end + 2);
        const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
        if (data) onStatus(JSON.parse(data));
      }
    }
  } catch (error) {
    if (error.name !== "AbortError") console.warn("the status stream ended", error);
  }
}

function every(seconds, call) {
  const timer = setInterval(call, seconds * 1000);
  leaving.push(() => clearInterval(timer));
}

// --- signing in -------------------------------------------------------------------------------------------------

let caller = null;

function signOut(message) {
  sessionStorage.removeItem(TOKEN);
  caller = null;
  location.hash = "#/sign-in";
  if (message) notice(message);
}

function signInView() {
  const input = h("input", { type: "password", name: "token", id: "token", autocomplete: "off", required: true,
                             "aria-describedby": "token-help" });
  const problem = h("p", { class: "error", role: "alert" });
  const form = h("form", {
    onsubmit: async (event) => {
      event.preventDefault();
      problem.textContent = "";
      try {
        caller = await api("/v1/auth/whoami", { token: input.value.trim() });
        sessionStorage.setItem(TOKEN, input.value.trim());
        location.hash = "#/projects";
      } catch (error) {
        problem.textContent = error.status === 401 ? "This token is not accepted." : error.message;
      }
    },
  }, h("label", { for: "token" }, "API token", input),
     h("p", { id: "token-help", class: "muted" },
       "The server's admin token is in its data dir (admin-token); other tokens come from akka auth tokens create."),
     problem, h("button", { type: "submit" }, "Sign in"));
  show(h("section", { class: "panel signin" }, h("h1", {}, "Sign in"), form));
}

async function who() {
  if (!caller) caller = await api("/v1/auth/whoami");
  const box = document.getElementById("who");
  box.replaceChildren(h("span", {}, `${caller.name} (${caller.role})`),
                      h("button", { class: "quiet", type: "button", onclick: () => signOut("Signed out.") },
                        "Sign out"));
  document.getElementById("sections").hidden = false;
  return caller;
}

const mayTrain = () => caller && (caller.role === "trainer" || caller.role === "admin");

// --- projects and their runs ------------------------------------------------------------------------------------

async function projectsView() {
  const { projects } = await api("/v1/training/projects");
  const rows = projects.map((p) => h("tr", {},
    h("td", {}, h("a", { href: `#/projects/${encodeURIComponent(p.name)}` }, p.name)),
    h("td", {}, p.archived ? "archived" : "open"),
    h("td", {}, age(p.createdAt))));
  show(h("h1", {}, "Projects"),
       h("section", { class: "panel scroll" }, projects.length ? h("table", {},
         h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Project"), h("th", { scope: "col" }, "State"),
                            h("th", { scope: "col" }, "Created"))),
         h("tbody", {}, rows)) : h("p", { class: "muted" }, "No project yet: akka training projects create NAME")));
}

function progressOf(run) {
  const p = run.progress || {};
  if (p.totalSteps) return `${p.observedStep ?? 0}/${p.totalSteps}`;
  if (p.rowsTotal) return `rows ${p.rowsDone ?? 0}/${p.rowsTotal}`;
  return "—";
}

async function runsView(project) {
  const phase = h("select", { id: "phase", name: "phase" },
    ["all", "open", "QUEUED", "PREPARING", "TRAINING", "PAUSED", "COMPLETED", "FAILED", "CANCELLED"]
      .map((p) => h("option", { value: p }, p)));
  const method = h("select", { id: "method", name: "method" },
    ["all", "sft", "dpo", "grpo", "gspo"].map((m) => h("option", { value: m }, m)));
  const body = h("tbody", {});
  const table = h("table", { "aria-label": `Runs of ${project}` },
    h("thead", {}, h("tr", {}, ["Run", "Phase", "Method", "Base model", "Dataset", "Progress", "Loss", "Device time",
                                "Started"].map((c, i) => h("th", { scope: "col", class: i === 6 || i === 7 ? "num" : null }, c)))),
    body);
  const refresh = async () => {
    const query = new URLSearchParams({ project });
    if (phase.value !== "all") query.set("phase", phase.value);
    const { runs } = await api(`/v1/training/runs?${query}`);
    body.replaceChildren(...runs.filter((r) => method.value === "all" || r.method === method.value).map((r) =>
      h("tr", { "data-run": r.runId },
        h("td", {}, h("a", { href: `#/runs/${r.runId}` }, short(r.runId))),
        h("td", { class: `phase phase-${r.phase}` }, r.phase),
        h("td", {}, r.method), h("td", {}, r.baseModel?.id), h("td", {}, r.dataset?.reference),
        h("td", {}, progressOf(r)), h("td", { class: "num" }, fmt(r.progress?.loss)),
        h("td", { class: "num" }, r.cost?.deviceSeconds !== undefined ? `${Math.round(r.cost.deviceSeconds)} s` : "—"),
        h("td", {}, age(r.timing?.createdAt)))));
    if (!runs.length) body.append(h("tr", {}, h("td", { colspan: 9, class: "muted" }, "No run matches.")));
  };
  phase.addEventListener("change", refresh);
  method.addEventListener("change", refresh);
  show(h("h1", {}, `Runs of ${project}`),
       h("div", { class: "filters" }, h("label", { for: "phase" }, "Phase", phase),
         h("label", { for: "method" }, "Method", method)),
       h("section", { class: "panel scroll" }, table));
  await refresh();
  every(3, refresh);
}

// --- a run ------------------------------------------------------------------------------------------------------

const CURVES = [  // [title, [metric, label, kind]...]: a chart for each whose metrics the run logged
  ["Loss", [["loss", "training loss", "train"], ["validationLoss", "validation loss", "validation"]]],
  ["Learning rate", [["learningRate", "learning rate", "train"]]],
  ["Tokens per second", [["tokensPerSecond", "tokens/s", "train"]]],
  ["Preference", [["preferenceAccuracy", "accuracy", "train"], ["rewardMargin", "reward margin", "train"]]],
  ["Reward", [["reward", "reward", "train"], ["kl", "KL", "train"]]],
];

function withRates(steps) {
  // tokens/s between logged updates, from the tokens trained so far and when each update was logged
  return steps.map((point, i) => {
    const before = steps[i - 1];
    if (!before || point.tokens === undefined || before.tokens === undefined) return point;
    const seconds = (Date.parse(point.at) - Date.parse(before.at)) / 1000;
    return seconds > 0 ? { ...point, tokensPerSecond: (point.tokens - before.tokens) / seconds } : point;
  });
}

function drawCharts(box, metrics) {
  if (!window.Plotly) return;
  const train = withRates(metrics.steps);
  const rewardTerms = [...new Set(train.flatMap((p) => Object.keys(p).filter((k) => k.startsWith("reward/"))))];
  const curves = CURVES.map(([title, series]) => [title, title === "Reward"
    ? [...series, ...rewardTerms.map((k) => [k, k, "train"])] : series]);
  for (const [title, series] of curves) {
    const traces = series.map(([key, label, kind]) => {
      const points = (kind === "train" ? train : metrics.validation).filter((p) => typeof p[key] === "number");
      return { x: points.map((p) => p.step), y: points.map((p) => p[key]), name: label, mode: "lines+markers",
               type: "scatter" };
    }).filter((t) => t.x.length);
    const id = `chart-${title.replace(/\W+/g, "-").toLowerCase()}`;
    let node = document.getElementById(id);
    if (!traces.length) { node?.remove(); continue; }
    if (!node) {
      node = h("figure", { class: "panel chart", id, "aria-label": `${title} by update` });
      box.append(node);
    }
    node.dataset.points = String(traces[0].x.length);
    Plotly.react(node, traces, { title: { text: title }, margin: { t: 40, r: 10, b: 40, l: 50 },
                                 xaxis: { title: { text: "update" } }, legend: { orientation: "h" } },
                 { displaylogo: false, responsive: true });
  }
}

function runFacts(run) {
  const p = run.progress || {};
  return facts([
    ["Phase", h("span", { class: `phase phase-${run.phase}`, id: "run-phase" }, run.phase)],
    ["Attempt", run.attempt], ["Method", run.method],
    ["Base model", `${run.baseModel?.id} @ ${short(run.baseModel?.commit)}`],
    ["Dataset", run.dataset?.reference], ["Validation", run.validation?.reference],
    ["Progress", h("span", { id: "run-progress" }, progressOf(run))], ["Loss", fmt(p.loss)],
    ["Saved step", run.savedStep ?? "—"], ["Model", run.results?.model],
    ["Weights", run.results?.weightsDigest ? short(run.results.weightsDigest.replace("sha256:", "")) : undefined],
    ["Waiting for", run.waitingFor || undefined], ["Failure", run.failureReason || undefined],
    ["Parent", run.parentRunId ? h("a", { href: `#/runs/${run.parentRunId}` }, short(run.parentRunId)) : undefined],
  ]);
}

function checksPanel(run) {
  const parts = [];
  if (run.checks) parts.push(h("p", {}, `Start checks: ${run.checks.status || "—"}`, run.checks.summary ? ` — ${run.checks.summary}` : ""));
  if (run.lengthCheck) parts.push(h("p", {}, `Length check: ${run.lengthCheck.status}`));
  if (run.progress?.dataFit) parts.push(h("p", {}, `Data fit: ${JSON.stringify(run.progress.dataFit)}`));
  if (run.warnings?.length) parts.push(h("ul", { class: "warnings" }, run.warnings.map((w) => h("li", {}, w))));
  return parts.length ? h("section", { class: "panel" }, h("h2", {}, "Checks and warnings"), parts) : null;
}

function actionsPanel(run, reload) {
  if (!mayTrain()) return null;
  const act = async (verb, body, question) => {
    if (!confirm(question)) return;
    try {
      await api(`/v1/training/runs/${run.runId}/${verb}`, { method: "POST", body });
      notice(`Asked to ${verb} run ${short(run.runId)}.`);
      reload();
    } catch (error) {
      notice(`${error.message}${error.hint ? ` (${error.hint})` : ""}`);
    }
  };
  const open = !run.terminal;
  return h("section", { class: "panel" }, h("h2", {}, "Actions"), h("div", { class: "actions" },
    h("button", { type: "button", id: "pause", disabled: !open || run.phase === "PAUSED",
                  onclick: () => act("pause", { checkpoint: "save" }, `Pause run ${short(run.runId)}, saving first?`) },
      "Pause"),
    h("button", { type: "button", id: "resume", disabled: run.phase !== "PAUSED",
                  onclick: () => act("resume", {}, `Resume run ${short(run.runId)}?`) }, "Resume"),
    h("button", { type: "button", id: "cancel", class: "quiet", disabled: !open,
                  onclick: () => act("cancel", {}, `Cancel run ${short(run.runId)}? It cannot be resumed.`) },
      "Cancel")));
}

async function snapshotsPanel(run) {
  const { snapshots } = await api(`/v1/training/runs/${run.runId}/snapshots`);
  if (!snapshots.length) return null;
  return h("section", { class: "panel scroll" }, h("h2", {}, "Snapshots"), h("table", {},
    h("thead", {}, h("tr", {}, ["Snapshot", "Step", "Holds", "Registered", "Saved"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, snapshots.map((s) => h("tr", {},
      h("td", {}, short(s.snapshotId)), h("td", { class: "num" }, s.step),
      h("td", {}, (s.kinds || []).join(", ")), h("td", {}, (s.registered || []).join(", ") || "—"),
      h("td", {}, age(s.committedAt)))))));
}

async function runView(runId) {
  let run = await api(`/v1/training/runs/${runId}`);
  let metrics = await api(`/v1/training/runs/${runId}/metrics`);
  const charts = h("div", { class: "charts", id: "charts" });
  const head = h("section", { class: "panel", id: "run-facts" }, runFacts(run));
  const render = async () => {
    show(h("h1", {}, `Run ${short(run.runId)} `, h("span", { class: "muted" }, `in ${run.project}`)),
         head, actionsPanel(run, reload), charts, checksPanel(run), await snapshotsPanel(run));
    drawCharts(charts, metrics);
  };
  const reload = async () => {
    run = await api(`/v1/training/runs/${runId}`);
    metrics = await api(`/v1/training/runs/${runId}/metrics`);
    await render();
  };
  await render();
  let fetching = false;
  follow(`/v1/training/runs/${runId}/events`, async (status) => {
    const phaseChanged = status.phase !== run.phase;
    run = status;
    head.replaceChildren(runFacts(run));
    if (fetching) return;
    fetching = true;
    try {
      const fresh = await api(`/v1/training/runs/${runId}/metrics`);
      metrics = fresh;
      if (phaseChanged) await render(); else drawCharts(charts, metrics);
    } finally {
      fetching = false;
    }
  });
}

// --- endpoints and the chat box ---------------------------------------------------------------------------------

async function endpointsView() {
  const { endpoints } = await api("/v1/training/endpoints");
  const live = endpoints.filter((e) => !e.terminal);
  const rows = live.map((e) => h("tr", {},
    h("td", {}, h("a", { href: `#/endpoints/${e.endpointId}` }, short(e.endpointId))),
    h("td", { class: `phase phase-${e.phase}` }, e.phase), h("td", {}, e.project),
    h("td", {}, e.models.map((m) => m.name).join(", ")),
    h("td", { class: "num" }, e.load?.inFlight ?? "—"), h("td", { class: "num" }, e.load?.queued ?? "—"),
    h("td", { class: "num" }, fmt(e.load?.tokensPerSecond, 3)), h("td", {}, age(e.lastRequestAt))));
  show(h("h1", {}, "Endpoints"), h("section", { class: "panel scroll" }, live.length ? h("table", {},
    h("thead", {}, h("tr", {}, ["Endpoint", "Phase", "Project", "Models", "In flight", "Queued", "Tokens/s",
                                "Last request"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows)) : h("p", { class: "muted" }, "No endpoint is up: akka training endpoints create MODEL")));
}

async function endpointView(endpointId) {
  const endpoint = await api(`/v1/training/endpoints/${endpointId}`);
  const model = h("select", { id: "chat-model", name: "model" },
    endpoint.models.filter((m) => m.ready && m.enabled).map((m) => h("option", { value: m.name }, m.name)));
  const said = h("ol", { class: "chat", id: "chat-log", "aria-live": "polite" });
  const input = h("textarea", { id: "chat-input", name: "message", rows: 3, required: true });
  const history = [];
  const send = h("button", { type: "submit", id: "chat-send" }, "Send");
  const form = h("form", {
    onsubmit: async (event) => {
      event.preventDefault();
      const text = input.value.trim();
      if (!text) return;
      history.push({ role: "user", content: text });
      said.append(h("li", { class: "user" }, h("strong", {}, "You: "), text));
      input.value = "";
      send.disabled = true;
      try {
        const answer = await api("/v1/chat/completions", { method: "POST",
          body: { model: model.value, messages: history, max_tokens: 128 } });
        const reply = answer.choices?.[0]?.message?.content ?? "";
        history.push({ role: "assistant", content: reply });
        said.append(h("li", { class: "assistant" }, h("strong", {}, `${model.value}: `), reply));
      } catch (error) {
        said.append(h("li", { class: "error" }, error.message));
      } finally {
        send.disabled = false;
      }
    },
  }, h("label", { for: "chat-model" }, "Model", model), h("label", { for: "chat-input" }, "Message", input), send);
  show(h("h1", {}, `Endpoint ${short(endpoint.endpointId)} `, h("span", { class: "muted" }, `in ${endpoint.project}`)),
       h("section", { class: "panel" }, facts([
         ["Phase", h("span", { class: `phase phase-${endpoint.phase}` }, endpoint.phase)],
         ["Base model", endpoint.baseModel?.id], ["Devices", (endpoint.devicesHeld || []).join(", ") || "—"],
         ["Served", endpoint.load?.served ?? "—"], ["Tokens/s", fmt(endpoint.load?.tokensPerSecond, 3)],
         ["Latency p95", endpoint.load?.latencyP95Seconds !== undefined ? `${fmt(endpoint.load.latencyP95Seconds, 3)} s` : "—"],
       ])),
       h("section", { class: "panel" }, h("h2", {}, "Chat"), said, form));
}

// --- routing ----------------------------------------------------------------------------------------------------

const ROUTES = [
  [/^#\/sign-in$/, signInView, false],
  [/^#\/projects$/, projectsView, true],
  [/^#\/projects\/([^/]+)$/, (name) => runsView(decodeURIComponent(name)), true],
  [/^#\/runs\/([0-9a-f]+)$/, runView, true],
  [/^#\/endpoints$/, endpointsView, true],
  [/^#\/endpoints\/([0-9a-f]+)$/, endpointView, true],
];

async function route() {
  for (const end of leaving) end();
  leaving = [];
  const hash = location.hash || "#/projects";
  if (!sessionStorage.getItem(TOKEN) && hash !== "#/sign-in") {
    location.hash = "#/sign-in";
    return;
  }
  for (const [pattern, view, signedIn] of ROUTES) {
    const match = hash.match(pattern);
    if (!match) continue;
    try {
      if (signedIn) await who();
      await view(...match.slice(1));
    } catch (error) {
      if (error.status !== 401) {
        show(h("p", { class: "error", role: "alert" }, error.message, error.hint ? ` (${error.hint})` : ""));
      }
    }
    return;
  }
  show(h("p", {}, "No such page. ", h("a", { href: "#/projects" }, "Projects")));
}

window.addEventListener("hashchange", route);
route();
