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

// How far an item is: its `count` (done of total in a unit), in the words the server answers for every kind and the
// CLI's followers show. Steps go bare ("12/40"), other units are named ("rows prepared 3/12").
function progressOf(item) {
  const c = item.count;
  if (!c) return "—";
  const of = c.total ? `${c.done}/${c.total}` : `${c.done}`;
  return c.unit === "steps" ? of : `${c.unit} ${of}`;
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
       h("p", {}, h("a", { href: `#/projects/${encodeURIComponent(project)}/evaluations` }, "Evaluations and scores"),
         " · ", h("a", { href: `#/projects/${encodeURIComponent(project)}/comparisons` }, "Comparisons"),
         " · ", h("a", { href: `#/projects/${encodeURIComponent(project)}/pipelines` }, "Pipelines")),
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
  // tokens/s over the last few logged updates, from the tokens trained so far and when each update reached the
  // server (metrics arrive in batches, so one update's own time would be noise)
  const WINDOW = 8;
  return steps.map((point, i) => {
    const before = steps[Math.max(0, i - WINDOW)];
    if (i === 0 || point.tokens === undefined || before.tokens === undefined) return point;
    const seconds = (Date.parse(point.at) - Date.parse(before.at)) / 1000;
    return seconds >= 1 ? { ...point, tokensPerSecond: (point.tokens - before.tokens) / seconds } : point;
  });
}

function drawCharts(box, metrics) {
  if (!window.Plotly) return;
  const train = withRates(metrics.steps);
  // a reinforcement run's reward terms: reward:<term> (their spread, reward:<term>:std, is left out)
  const rewardTerms = [...new Set(train.flatMap((p) => Object.keys(p).filter(
    (k) => k.startsWith("reward:") && !k.endsWith(":std"))))];
  const curves = CURVES.map(([title, series]) => [title, title === "Reward"
    ? [...series, ...rewardTerms.map((k) => [k, k, "train"])] : series]);
  const drawn = [];
  for (const [title, series] of curves) {
    const traces = series.map(([key, label, kind]) => {
      const points = (kind === "train" ? train : metrics.validation).filter((p) => typeof p[key] === "number");
      return { x: points.map((p) => p.step), y: points.map((p) => p[key]), name: label, mode: "lines+markers",
               type: "scatter" };
    }).filter((t) => t.x.length);
    const id = `chart-${title.replace(/\W+/g, "-").toLowerCase()}`;
    let node = document.getElementById(id);
    if (!traces.length) { node?.parentElement.remove(); continue; }
    if (!node) {
      node = h("div", { class: "chart", id, role: "img", "aria-label": `${title} by update` });
      box.append(h("section", { class: "panel" }, node));
    }
    drawn.push([node, title, traces]);
  }
  // every chart's place is laid out before any is drawn: each is drawn at its own width
  for (const [node, title, traces] of drawn) {
    node.dataset.points = String(traces[0].x.length);
    Plotly.react(node, traces, { title: { text: title }, margin: { t: 40, r: 10, b: 40, l: 50 }, height: 300,
                                 width: node.clientWidth || undefined, xaxis: { title: { text: "update" } },
                                 legend: { orientation: "h" } },
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
    // the run's notes (akka training runs annotate): its column in the scores tables and its description
    ["Config name", run.configName || undefined], ["Description", run.description || undefined],
    ["Progress", h("span", { id: "run-progress" }, progressOf(run))], ["Loss", fmt(p.loss)],
    ["Saved step", run.savedStep ?? "—"], ["Model", run.results?.model],
    ["Weights", run.results?.weightsDigest ? short(run.results.weightsDigest.replace("sha256:", "")) : undefined],
    ["Waiting for", run.waitingFor || undefined], ["Failure", run.failureReason || undefined],
    // execution.stopWhen was met (its guards' warnings are among the run's warnings, in "Checks and warnings")
    ["Stopped", run.guards?.stop ? `${run.guards.stop.message} (met at update ${run.guards.stop.step})` : undefined],
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

async function branchFrom(run, snapshot) {
  // a dry run first: what the branch would restore and why, confirmed before anything starts
  try {
    const dry = await api(`/v1/training/runs/${run.runId}/branch?dryRun=true`, { method: "POST",
                          body: { snapshotId: snapshot.snapshotId } });
    const b = dry.branch || {};
    if (!confirm(`Branch run ${short(run.runId)} from step ${b.step ?? snapshot.step}: restores ${b.restore} (${b.why || ""}). Start it?`)) return;
    const started = await api(`/v1/training/runs/${run.runId}/branch`, { method: "POST",
                              body: { snapshotId: snapshot.snapshotId } });
    notice(`Branch ${short(started.runId)} started.`);
    location.hash = `#/runs/${started.runId}`;
  } catch (error) {
    notice(`${error.message}${error.hint ? ` (${error.hint})` : ""}`);
  }
}

async function evaluate(run, model) {
  const dataset = prompt(`Evaluate ${model} on which dataset (NS/NAME[:vN])?`);
  if (!dataset) return;
  if (!confirm(`Start an evaluation of ${model} on ${dataset}?`)) return;
  try {
    const started = await api("/v1/training/evaluations", { method: "POST",
                              body: { model, dataset: dataset.trim(), project: run.project } });
    location.hash = `#/evaluations/${started.evaluationId}`;
  } catch (error) {
    notice(`${error.message}${error.hint ? ` (${error.hint})` : ""}`);
  }
}

async function snapshotsPanel(run) {
  const [{ snapshots }, { evaluations }] = await Promise.all([
    api(`/v1/training/runs/${run.runId}/snapshots`),
    api(`/v1/training/evaluations?project=${encodeURIComponent(run.project)}&phase=COMPLETED`)]);
  if (!snapshots.length) return null;
  // each registered version as the registry answers it: its score from the project's standing evaluation, and the
  // datasets it was trained and validated on
  const registered = [...new Set(snapshots.flatMap((s) => s.registered || []))];
  const versions = Object.fromEntries(await Promise.all(registered.map(async (reference) => {
    const [artifact, selector] = reference.split(":");
    const [namespace, name] = artifact.split("/");
    const path = `/v1/registry/models/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/versions/` +
                 encodeURIComponent(selector);
    return [reference, await api(path).catch(() => null)];
  })));
  const seen = (model) => new Set((versions[model]?.lineage?.datasets || []).map((d) => d.digest));
  // a model's score is never one on what it was trained on: its held-out score from the project's standing
  // evaluation, else its newest completed evaluation on a dataset it never saw (the list is newest first), each
  // named with its dataset
  const scored = {};
  for (const e of evaluations) if (!(e.model in scored) && !seen(e.model).has(e.dataset?.digest)) scored[e.model] = e;
  const scoreOf = (s) => (s.registered || []).map((m) => {
    const standing = versions[m]?.standingScore;
    if (standing?.evaluationId && standing.meanScore != null) {
      return h("a", { href: `#/evaluations/${standing.evaluationId}` },
               `${fmt(standing.meanScore, 3)} held-out on ${standing.dataset}`);
    }
    const e = scored[m];
    return e ? h("a", { href: `#/evaluations/${e.evaluationId}` }, `${fmt(e.report?.meanScore, 3)} on ${e.dataset?.reference}`)
             : null;
  }).filter(Boolean);
  const trainer = mayTrain();
  return h("section", { class: "panel scroll" }, h("h2", {}, "Snapshots"), h("table", { id: "snapshots" },
    h("thead", {}, h("tr", {}, ["Snapshot", "Step", "Holds", "Registered", "Held-out score", "Saved", ...(trainer ? ["Actions"] : [])]
      .map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, snapshots.map((s) => h("tr", { "data-step": s.step },
      h("td", {}, short(s.snapshotId)), h("td", { class: "num" }, s.step),
      h("td", {}, (s.kinds || []).join(", ")), h("td", {}, (s.registered || []).join(", ") || "—"),
      h("td", { class: "score" }, scoreOf(s).length ? scoreOf(s) : "—"), h("td", {}, age(s.committedAt)),
      trainer ? h("td", { class: "actions" },
        h("button", { type: "button", class: "quiet", onclick: () => branchFrom(run, s) }, "Branch…"),
        (s.registered || []).length ? h("button", { type: "button", class: "quiet",
          onclick: () => evaluate(run, s.registered[0]) }, "Evaluate…") : null) : null)))));
}

function timelinePanel(run) {
  // how long the run spent in each phase, in the order it went through them
  const spent = Object.entries(run.timing?.phaseMillis || {}).filter(([, ms]) => ms > 0);
  if (!spent.length) return null;
  const total = spent.reduce((sum, [, ms]) => sum + ms, 0);
  return h("section", { class: "panel" }, h("h2", {}, "Phases"), h("div", { class: "timeline", id: "timeline" },
    spent.map(([phase, ms]) => h("span", { class: `phase-bar phase-${phase}`, style: `flex: ${ms / total}`,
                                           title: `${phase}: ${(ms / 1000).toFixed(1)} s` },
      `${phase} ${(ms / 1000).toFixed(1)} s`))));
}

async function settingsPanel(run) {
  const { settings } = await api(`/v1/training/runs/${run.runId}?settings=true`);
  if (!settings) return null;
  return h("details", { class: "panel", id: "settings" }, h("summary", {}, h("strong", {}, "Settings and where each came from")),
    h("div", { class: "scroll" }, h("table", {},
      h("thead", {}, h("tr", {}, ["Setting", "Value", "Source"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, Object.entries(settings).map(([path, { value, source }]) => h("tr", {},
        h("td", {}, path), h("td", { class: "wrap" }, typeof value === "object" ? JSON.stringify(value) : String(value)),
        h("td", {}, source)))))));
}

async function drawTree(box, run) {
  // the run's family (its root and every branch under it), each run's loss on the updates of its lineage
  const { runs } = await api(`/v1/training/runs?project=${encodeURIComponent(run.project)}`);
  const byId = Object.fromEntries(runs.map((r) => [r.runId, r]));
  let root = run;
  while (root.parentRunId && byId[root.parentRunId]) root = byId[root.parentRunId];
  const family = [];
  const walk = (r, depth) => {
    family.push([r, depth]);
    runs.filter((c) => c.parentRunId === r.runId).forEach((c) => walk(c, depth + 1));
  };
  walk(byId[root.runId] || root, 0);
  if (family.length < 2) { box.hidden = true; return; }
  box.hidden = false;
  const list = h("ul", { class: "tree" }, family.map(([r, depth]) => h("li", { style: `margin-left: ${depth * 16}px` },
    r.runId === run.runId ? h("strong", {}, short(r.runId)) : h("a", { href: `#/runs/${r.runId}` }, short(r.runId)),
    ` ${r.phase}`, r.branch ? ` — from step ${r.branch.step} (${r.branch.restore})` : "")));
  const chart = h("div", { class: "chart", id: "chart-tree", role: "img", "aria-label": "Loss of each run of the family" });
  box.replaceChildren(h("h2", {}, "Branch tree"), list, chart);
  // a branch's updates are drawn from the parent's update it started at
  const offset = (r) => (r.branch ? r.branch.step : 0) + (r.branch && byId[r.parentRunId] ? offset(byId[r.parentRunId]) : 0);
  const traces = [];
  for (const [r] of family.slice(0, 8)) {
    const m = await api(`/v1/training/runs/${r.runId}/metrics`);
    const points = m.steps.filter((p) => typeof p.loss === "number");
    traces.push({ x: points.map((p) => p.step + offset(r)), y: points.map((p) => p.loss), name: short(r.runId),
                  mode: "lines", type: "scatter" });
  }
  chart.dataset.runs = String(traces.length);
  if (window.Plotly) {
    Plotly.react(chart, traces, { title: { text: "Loss across the branch tree" }, height: 300,
                                  width: chart.clientWidth || undefined, margin: { t: 40, r: 10, b: 40, l: 50 },
                                  xaxis: { title: { text: "update (from the root's start)" } } },
                 { displaylogo: false, responsive: true });
  }
}

async function runView(runId) {
  let run = await api(`/v1/training/runs/${runId}`);
  let metrics = await api(`/v1/training/runs/${runId}/metrics`);
  const charts = h("div", { class: "charts", id: "charts" });
  const head = h("section", { class: "panel", id: "run-facts" });
  let following = false;
  let fetching = false;
  const tree = h("section", { class: "panel", id: "branch-tree" });
  const render = async () => {
    head.replaceChildren(runFacts(run));
    show(h("h1", {}, `Run ${short(run.runId)} `, h("span", { class: "muted" }, `in ${run.project}`)),
         head, actionsPanel(run, reload), timelinePanel(run), charts, tree, checksPanel(run),
         await snapshotsPanel(run), await settingsPanel(run));
    drawCharts(charts, metrics);
    drawTree(tree, run);
  };
  // the status stream ends once the run settles (paused or ended); a resume starts following it again
  const watch = async () => {
    if (following || run.settled) return;
    following = true;
    await follow(`/v1/training/runs/${runId}/events`, async (status) => {
      const phaseChanged = status.phase !== run.phase;
      run = status;
      head.replaceChildren(runFacts(run));
      if (fetching) return;
      fetching = true;
      try {
        metrics = await api(`/v1/training/runs/${runId}/metrics`);
        if (phaseChanged) await render(); else drawCharts(charts, metrics);
      } finally {
        fetching = false;
      }
    });
    following = false;
  };
  const reload = async () => {
    run = await api(`/v1/training/runs/${runId}`);
    metrics = await api(`/v1/training/runs/${runId}/metrics`);
    await render();
    watch();
  };
  await render();
  watch();
}

// --- evaluations ------------------------------------------------------------------------------------------------

async function evaluationsView(project) {
  const [scores, { evaluations }] = await Promise.all([
    api(`/v1/training/projects/${encodeURIComponent(project)}/scores`),
    api(`/v1/training/evaluations?project=${encodeURIComponent(project)}`)]);
  const chart = h("div", { class: "chart", id: "chart-scores", role: "img",
                           "aria-label": `Mean score of each model on ${scores.dataset || "no dataset yet"}` });
  show(h("h1", {}, `Evaluations of ${project}`),
       h("section", { class: "panel" }, chart),
       h("section", { class: "panel scroll" }, h("table", {},
         h("thead", {}, h("tr", {}, ["Evaluation", "Phase", "Model", "Dataset", "Grader", "Mean score", "Exact",
                                     "Started"].map((c) => h("th", { scope: "col" }, c)))),
         h("tbody", {}, evaluations.map((e) => h("tr", {},
           h("td", {}, h("a", { href: `#/evaluations/${e.evaluationId}` }, short(e.evaluationId))),
           h("td", { class: `phase phase-${e.phase}` }, e.phase), h("td", {}, e.model),
           h("td", {}, e.dataset?.reference), h("td", {}, e.grader),
           h("td", { class: "num" }, fmt(e.report?.meanScore, 3)), h("td", { class: "num" }, fmt(e.report?.exactMatchRate, 3)),
           h("td", {}, age(e.createdAt))))))));
  // the project's scores table as a chart: each base model's own score, then each configuration trained on it
  const bars = scores.groups.flatMap((g) => [
    ...(g.baseline ? [{ x: `${g.baseModel} (base)`, y: g.baseline.meanScore }] : []),
    ...g.columns.map((c) => ({ x: `${c.model}`, y: c.meanScore }))]);
  if (window.Plotly && bars.length) {
    Plotly.react(chart, [{ type: "bar", x: bars.map((b) => b.x), y: bars.map((b) => b.y) }],
                 { title: { text: `Mean score on ${scores.dataset} (${scores.grader})` }, height: 320,
                   width: chart.clientWidth || undefined, yaxis: { range: [0, 1] }, margin: { t: 40, b: 80 } },
                 { displaylogo: false, responsive: true });
    chart.dataset.bars = String(bars.length);
  } else {
    chart.replaceChildren(h("p", { class: "muted" }, "No completed evaluation yet."));
  }
}

async function evaluationView(evaluationId) {
  const evaluation = await api(`/v1/training/evaluations/${evaluationId}`);
  const { predictions } = await api(`/v1/training/evaluations/${evaluationId}/predictions?limit=200`);
  show(h("h1", {}, `Evaluation ${short(evaluationId)} `, h("span", { class: "muted" }, `of ${evaluation.model}`)),
       h("section", { class: "panel" }, facts([
         ["Phase", h("span", { class: `phase phase-${evaluation.phase}` }, evaluation.phase)],
         ["Progress", progressOf(evaluation)],
         ["Dataset", evaluation.dataset?.reference], ["Grader", evaluation.grader],
         ["Mean score", fmt(evaluation.report?.meanScore, 3)], ["Exact", fmt(evaluation.report?.exactMatchRate, 3)],
         ["Scored", evaluation.report ? `${evaluation.report.scored} (${evaluation.report.unscored} unscored)` : "—"],
         ["Failure", evaluation.failureReason || undefined]])),
       h("section", { class: "panel scroll" }, h("h2", {}, "Predictions"), h("table", { id: "predictions" },
         h("thead", {}, h("tr", {}, ["Line", "Expected", "Answer", "Score"].map((c) => h("th", { scope: "col" }, c)))),
         h("tbody", {}, predictions.map((p) => h("tr", {},
           h("td", { class: "num" }, p.line), h("td", { class: "wrap" }, p.expected), h("td", { class: "wrap" }, p.answer),
           h("td", { class: "num" }, fmt(p.score, 3))))))));
}

// --- pipelines --------------------------------------------------------------------------------------------------

async function pipelinesView(project) {
  const { pipelines } = await api(`/v1/training/pipelines?project=${encodeURIComponent(project)}`);
  show(h("h1", {}, `Pipelines of ${project}`),
       h("section", { class: "panel scroll" }, pipelines.length ? h("table", { id: "pipelines" },
         h("thead", {}, h("tr", {}, ["Pipeline", "Phase", "Stages", "Device time", "Created"]
           .map((c) => h("th", { scope: "col" }, c)))),
         h("tbody", {}, pipelines.map((p) => h("tr", {},
           h("td", {}, h("a", { href: `#/pipelines/${p.pipelineId}` }, short(p.pipelineId))),
           h("td", { class: `phase phase-${p.phase}` }, p.phase), h("td", {}, progressOf(p)),
           h("td", { class: "num" }, `${Math.round(p.deviceSeconds)} s`), h("td", {}, age(p.createdAt))))))
         : h("p", { class: "muted" }, "No pipeline yet: akka training pipelines start -f PLAN")));
}

// the page of each kind of stage job
const JOB_PAGES = { run: "runs", evaluation: "evaluations", curation: "curations", distillation: "distillations" };

const OUTPUTS_DATASETS = new Set(["curate", "distill"]);  // the stages that give a dataset version

// A model version or dataset version a stage gave: a dataset's links to its page.
function outputLink(stage) {
  const [artifact] = stage.output.split(":");
  return OUTPUTS_DATASETS.has(stage.type) ? h("a", { href: `#/datasets/${artifact}` }, stage.output) : stage.output;
}

function stageBox(stage) {
  const page = JOB_PAGES[stage.jobKind];
  const job = stage.jobId ? (page ? h("a", { href: `#/${page}/${stage.jobId}` }, `${stage.jobKind} ${short(stage.jobId)}`)
                                  : `${stage.jobKind} ${short(stage.jobId)}`) : "not started";
  return h("li", { class: `stage stage-${stage.state}`, "data-stage": stage.name },
    h("strong", {}, stage.name), h("span", { class: "muted" }, ` ${stage.type}`),
    h("div", { class: "stage-state" }, stage.state), h("div", {}, job),
    stage.output ? h("div", { class: "wrap" }, "→ ", outputLink(stage)) : null,
    stage.meanScore != null ? h("div", {}, `score ${fmt(stage.meanScore, 3)}` +
                                           (stage.minMeanScore != null ? ` (gate ${stage.minMeanScore})` : "")) : null,
    stage.reason ? h("div", { class: "error wrap" }, stage.reason) : null);
}

async function pipelineView(pipelineId) {
  const p = await api(`/v1/training/pipelines/${pipelineId}`);
  show(h("h1", {}, `Pipeline ${short(p.pipelineId)} `, h("span", { class: "muted" }, `in ${p.project}`)),
       h("section", { class: "panel" }, facts([
         ["Phase", h("span", { class: `phase phase-${p.phase}` }, p.phase)], ["Stages", progressOf(p)],
         ["Device time", `${Math.round(p.deviceSeconds)} s`], ["Failure", p.failureReason || undefined],
         ["Created", age(p.createdAt)]])),
       h("section", { class: "panel scroll" }, h("h2", {}, "Stages"),
         h("ol", { class: "stage-graph", id: "stage-graph" }, p.stages.map(stageBox))));
  if (!p.terminal) {
    follow(`/v1/training/pipelines/${pipelineId}/events`, (status) => {
      document.getElementById("stage-graph")?.replaceChildren(...status.stages.map(stageBox));
    });
  }
}

// --- comparisons ------------------------------------------------------------------------------------------------

async function comparisonsView(project) {
  const { comparisons } = await api(`/v1/training/comparisons?project=${encodeURIComponent(project)}`);
  show(h("h1", {}, `Comparisons of ${project}`),
       h("section", { class: "panel scroll" }, comparisons.length ? h("table", { id: "comparisons" },
         h("thead", {}, h("tr", {}, ["Comparison", "Phase", "Source", "Models", "Dataset", "Result", "Winner", "Created"]
           .map((c) => h("th", { scope: "col" }, c)))),
         h("tbody", {}, comparisons.map((c) => h("tr", {},
           h("td", {}, h("a", { href: `#/comparisons/${c.comparisonId}` }, short(c.comparisonId))),
           h("td", { class: `phase phase-${c.phase}` }, c.phase), h("td", {}, c.source.model),
           h("td", { class: "num" }, c.entries.length), h("td", {}, c.dataset.reference), h("td", {}, c.result || "—"),
           h("td", {}, c.winner?.model || "—"), h("td", {}, age(c.createdAt))))))
         : h("p", { class: "muted" }, "No comparison yet: akka training comparisons create --source SNAPSHOT …")));
}

// The aliases (candidate, champion, …) that point at each version of the models compared, by NS/NAME:vN.
async function aliasesOf(models) {
  const names = [...new Set(models.filter((m) => m.includes("/") && m.includes(":v")).map((m) => m.split(":")[0]))];
  const pointed = {};
  await Promise.all(names.map(async (name) => {
    const [namespace, model] = name.split("/");
    const found = await api(`/v1/registry/models/${encodeURIComponent(namespace)}/${encodeURIComponent(model)}`)
      .catch(() => null);
    for (const version of found?.versions || []) {
      pointed[version.reference] = version.aliases.filter((alias) => alias !== "latest");
    }
  }));
  return pointed;
}

async function promote(model, reload) {
  // moves an alias of the model's own name to this version, after the user names it and confirms
  const alias = prompt(`Point which alias of ${model.split(":")[0]} at ${model}?`, "champion");
  if (!alias) return;
  const [name, version] = model.split(":");
  if (!confirm(`Move ${name}:${alias.trim()} to ${version}? Endpoints serving ${name}:${alias.trim()} follow it.`)) return;
  try {
    const [namespace, artifact] = name.split("/");
    const moved = await api(`/v1/registry/models/${encodeURIComponent(namespace)}/${encodeURIComponent(artifact)}` +
                            `/aliases/${encodeURIComponent(alias.trim())}`, { method: "PUT", body: { version } });
    notice(moved.moved ? `${name}:${alias.trim()} now names ${version}.` : `${name}:${alias.trim()} already named ${version}.`);
    reload();
  } catch (error) {
    notice(`${error.message}${error.hint ? ` (${error.hint})` : ""}`);
  }
}

async function rowAnswers(box, comparison, line) {
  const row = await api(`/v1/training/comparisons/${comparison.comparisonId}/rows/${line}`);
  box.replaceChildren(
    h("p", {}, h("strong", {}, "Prompt "), row.prompt ?? "—"), h("p", {}, h("strong", {}, "Expected "), row.expected ?? "—"),
    h("div", { class: "side-by-side", id: "row-answers" }, row.answers.map((a) => h("div", { class: "answer" },
      h("h3", {}, a.model, " ", h("span", { class: "muted" }, a.role)),
      h("p", { class: "wrap" }, a.answer ?? "not answered"), h("p", { class: "muted" }, `score ${fmt(a.score, 3)}`)))));
}

async function comparisonView(comparisonId) {
  const comparison = await api(`/v1/training/comparisons/${comparisonId}`);
  const pointed = await aliasesOf(comparison.entries.map((e) => e.model));
  const reload = () => comparisonView(comparisonId);
  const c = comparison;
  const w = c.winner;
  const trainer = mayTrain();
  const aliases = (model) => (pointed[model] || []).join(", ") || "—";
  const scored = c.scores.length ? h("table", { id: "comparison-scores" },
    h("thead", {}, h("tr", {}, ["Model", "Role", "Mean score", "95% interval", "Rows", "Vs source", "Aliases",
                                ...(trainer ? [""] : [])].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, c.scores.map((s) => h("tr", { "data-model": s.model, class: w?.model === s.model ? "winner" : null },
      h("td", {}, s.model, w?.model === s.model ? h("strong", {}, " — winner") : ""), h("td", {}, s.role),
      h("td", { class: "num" }, fmt(s.meanScore, 3)), h("td", { class: "num" }, `${fmt(s.low, 3)} – ${fmt(s.high, 3)}`),
      h("td", { class: "num" }, s.rows),
      h("td", { class: "num" }, s.versusSource == null ? "—" : `${s.versusSource >= 0 ? "+" : ""}${fmt(s.versusSource, 3)}`),
      h("td", { class: "aliases" }, aliases(s.model)),
      trainer ? h("td", {}, s.model.includes(":v") ? h("button", { type: "button", class: "quiet",
        onclick: () => promote(s.model, reload) }, "Promote…") : null) : null))))
    : h("table", { id: "comparison-entries" },
      h("thead", {}, h("tr", {}, ["Model", "Role", "Evaluation", "Phase", "Reused", "Aliases"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, c.entries.map((e) => h("tr", {}, h("td", {}, e.model), h("td", {}, e.role),
        h("td", {}, h("a", { href: `#/evaluations/${e.evaluationId}` }, short(e.evaluationId))),
        h("td", { class: `phase phase-${e.evaluationPhase}` }, e.evaluationPhase), h("td", {}, e.reused ? "yes" : "no"),
        h("td", { class: "aliases" }, aliases(e.model))))));
  const chart = h("div", { class: "chart", id: "chart-comparison", role: "img",
                           "aria-label": "Mean score of each model with its 95% interval" });
  const line = h("input", { type: "number", id: "row-line", name: "line", min: 1, max: c.dataset.rows, value: 1 });
  const answers = h("div", { id: "row-box" });
  line.addEventListener("change", () => rowAnswers(answers, c, Number(line.value) || 1));
  show(h("h1", {}, `Comparison ${short(c.comparisonId)} `, h("span", { class: "muted" }, `in ${c.project}`)),
       h("section", { class: "panel", id: "comparison-facts" }, facts([
         ["Phase", h("span", { class: `phase phase-${c.phase}` }, c.phase)], ["Progress", progressOf(c)],
         ["Result", c.result || "—"],
         ["Winner", w ? `${w.model}, by ${fmt(w.margin, 3)} over ${w.runnerUp} (${fmt(w.marginLow, 3)} – ${fmt(w.marginHigh, 3)})`
                      : c.result === "Partial" ? "none: a Partial result names no winner" : c.result ? "none: the top two tie" : "—"],
         ["Source", `snapshot ${short(c.source.snapshotId)} (step ${c.source.step}) as ${c.source.model}`],
         ["Dataset", c.dataset.reference], ["Grader", c.grader],
         ["Promotion", c.promotion ? (c.promotion.model ? `${c.promotion.alias} → ${c.promotion.model}`
                                                         : `${c.promotion.alias} not moved: ${c.promotion.whyNot}`) : undefined],
         ["Spend", c.spend ? `training ${Math.round(c.spend.training.deviceSeconds)} s, this comparison ` +
                             `${Math.round(c.spend.comparison.deviceSeconds)} s` : undefined],
         ["Failure", c.failureReason || undefined]])),
       h("section", { class: "panel scroll" }, h("h2", {}, "Models"), scored,
         (c.failed || []).length ? h("ul", { class: "warnings" }, c.failed.map((f) =>
           h("li", {}, `${f.model}: evaluation ${short(f.evaluationId)} ${f.phase}${f.reason ? ` — ${f.reason}` : ""}`))) : null),
       c.scores.length ? h("section", { class: "panel" }, chart) : null,
       h("section", { class: "panel" }, h("h2", {}, "Answers to one row"),
         h("div", { class: "filters" }, h("label", { for: "row-line" }, "Line", line)), answers));
  await rowAnswers(answers, c, 1);
  if (window.Plotly && c.scores.length) {
    Plotly.react(chart, [{ type: "bar", x: c.scores.map((s) => s.model), y: c.scores.map((s) => s.meanScore),
                           error_y: { type: "data", symmetric: false, array: c.scores.map((s) => s.high - s.meanScore),
                                      arrayminus: c.scores.map((s) => s.meanScore - s.low) } }],
                 { title: { text: `Mean score on ${c.dataset.reference} (${c.grader})` }, height: 320,
                   width: chart.clientWidth || undefined, margin: { t: 40, b: 80 },
                   yaxis: c.scores.every((s) => s.low >= 0 && s.high <= 1) ? { range: [0, 1] } : { rangemode: "tozero" } },
                 { displaylogo: false, responsive: true });
    chart.dataset.bars = String(c.scores.length);
  }
  if (!c.terminal) {
    follow(`/v1/training/comparisons/${comparisonId}/events`, (status) => {
      if (status.phase !== c.phase) reload();
    });
  }
}

// --- datasets and the row viewer --------------------------------------------------------------------------------

async function datasetsView() {
  const { datasets } = await api("/v1/registry/datasets");
  show(h("h1", {}, "Datasets"), h("section", { class: "panel scroll" }, datasets.length ? h("table", {},
    h("thead", {}, h("tr", {}, ["Dataset", "Kind", "Versions", "Latest", "Rows", "Registered"]
      .map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, datasets.map((d) => h("tr", {},
      h("td", {}, h("a", { href: `#/datasets/${d.namespace}/${d.name}` }, d.dataset)), h("td", {}, d.kind),
      h("td", { class: "num" }, d.versions), h("td", {}, `v${d.latest.version}`),
      h("td", { class: "num" }, d.latest.examples ?? d.latest.pairs ?? "—"), h("td", {}, age(d.latest.createdAt))))))
    : h("p", { class: "muted" }, "No dataset yet: akka registry datasets register NS/NAME -f FILE")));
}

function lineageOf(version) {
  const l = version.lineage;
  if (!l) return "—";
  const by = l.producedBy ? `${l.producedBy.kind} ${short(l.producedBy.id)}` : "";
  const teacher = l.teacher ? `; teacher ${l.teacher.reference}` : "";
  const source = l.source ? `; from ${l.source.reference}` : "";
  return `${by}${teacher}${source}` || JSON.stringify(l);
}

// A row's images, each fetched with the user's token (an <img> cannot send one) and shown beside the row.
async function rowImages(named) {
  return Promise.all(Object.entries(named).map(async ([path, sha256]) => {
    const response = await fetch(`/v1/registry/images/${sha256}`,
                                 { headers: { Authorization: `Bearer ${sessionStorage.getItem(TOKEN)}` } });
    if (!response.ok) return h("p", { class: "error" }, `${path}: the image could not be read (${response.status})`);
    const url = URL.createObjectURL(await response.blob());
    return h("figure", { class: "row-image" }, h("img", { src: url, alt: path }), h("figcaption", {}, path));
  }));
}

async function datasetView(namespace, name) {
  const base = `/v1/registry/datasets/${namespace}/${name}`;
  const [{ versions }, models] = await Promise.all([api(`${base}/versions`), api("/v1/training/base-models")]);
  const latest = versions[versions.length - 1];
  const chat = latest.format.startsWith("chat");
  const version = h("select", { id: "row-version", name: "version" },
    [...versions].reverse().map((v) => h("option", { value: `v${v.version}` }, `v${v.version}`)));
  const ready = models.models.filter((m) => m.status === "ready");
  const model = h("select", { id: "row-model", name: "model" }, ready.map((m) => h("option", { value: m.id }, m.id)));
  const line = h("input", { id: "row-line", name: "line", type: "number", min: 1, value: 1, inputmode: "numeric" });
  const shown = h("div", { id: "row-view", "aria-live": "polite" });
  const look = async () => {
    const offset = Math.max(0, Number(line.value || 1) - 1);
    try {
      const page = await api(`${base}/versions/${version.value}/rows?offset=${offset}&limit=1`);
      const item = page.items[0];
      if (!item) { shown.replaceChildren(h("p", { class: "muted" }, `${page.reference} has ${page.rows} rows.`)); return; }
      const pictures = await rowImages(item.images || {});
      const stored = (...said) => shown.replaceChildren(...pictures, ...said,
        h("pre", { class: "row-json" }, JSON.stringify(item.row, null, 2)));
      if (!chat || !model.value) { stored(); return; }
      if (pictures.length && !ready.find((m) => m.id === model.value)?.takesImages) {
        stored(h("p", { class: "muted" }, `${model.value} reads no images: the row as stored`));
        return;
      }
      const rendered = await api(`/v1/training/base-models/${model.value}/render`, { method: "POST", body: { row: item.row } });
      shown.replaceChildren(...pictures,
        h("p", { id: "row-counts" }, `Line ${item.line} of ${page.rows}: ${rendered.totalTokens} tokens, `,
          h("strong", {}, `${rendered.trainedTokens} trained`),
          rendered.tools.length ? ` — tools: ${rendered.tools.join(", ")}` : ""),
        h("pre", { class: "rendered", "aria-label": "The row as the model sees it; trained tokens are marked" },
          rendered.tokens.map(([text, trains]) => trains ? h("mark", { class: "trained" }, text) : text)));
    } catch (error) {
      shown.replaceChildren(h("p", { class: "error", role: "alert" }, error.message, error.hint ? ` (${error.hint})` : ""));
    }
  };
  for (const control of [version, model, line]) control.addEventListener("change", look);
  const analyses = h("section", { class: "panel", id: "analyses" });
  const showAnalyses = async () => {
    const reference = `${namespace}/${name}:${version.value}`;
    const { analyses: found } = await api(`/v1/training/datasets/analyses?dataset=${encodeURIComponent(reference)}`);
    const done = found.filter((a) => a.phase === "done" && a.report);
    if (!done.length) {
      analyses.replaceChildren(h("h2", {}, "Analysis"), h("p", { class: "muted" },
        `${reference} has no finished analysis: akka training datasets analyze ${reference} --base-model ID`));
      return;
    }
    analyses.replaceChildren(h("h2", {}, "Analysis"), ...done.map((a) => analysisPart(a, (at) => {
      line.value = at; look(); shown.scrollIntoView(); })));
    for (const a of done) drawLengths(a);
  };
  version.addEventListener("change", showAnalyses);
  const step = (by) => { line.value = Math.max(1, Number(line.value || 1) + by); look(); };
  show(h("h1", {}, `${namespace}/${name}`),
       h("section", { class: "panel scroll" }, h("h2", {}, "Versions"), h("table", {},
         h("thead", {}, h("tr", {}, ["Version", "Rows", "Tool rows", "Aliases", "Lineage", "Digest", "Registered"]
           .map((c) => h("th", { scope: "col" }, c)))),
         h("tbody", {}, [...versions].reverse().map((v) => h("tr", {},
           h("td", {}, `v${v.version}`), h("td", { class: "num" }, v.examples ?? v.pairs),
           h("td", { class: "num" }, v.toolRows), h("td", {}, v.aliases.join(", ") || "—"), h("td", {}, lineageOf(v)),
           h("td", {}, short(v.digest.replace("sha256:", ""))), h("td", {}, age(v.createdAt))))))),
       h("section", { class: "panel" }, h("h2", {}, "Row viewer"),
         h("div", { class: "filters" }, h("label", { for: "row-version" }, "Version", version),
           chat ? h("label", { for: "row-model" }, "Rendered by", model) : null,
           h("label", { for: "row-line" }, "Line", line),
           h("button", { type: "button", class: "quiet", onclick: () => step(-1) }, "Previous"),
           h("button", { type: "button", class: "quiet", onclick: () => step(1) }, "Next")),
         chat && !ready.length ? h("p", { class: "muted" }, "Select a base model to render rows: akka training base-models select ID") : null,
         shown),
       analyses);
  await look();
  await showAnalyses();
}

function analysisPart(analysis, toLine) {
  const r = analysis.report;
  const findings = r.findings || [];
  return h("div", { class: "analysis", "data-model": analysis.baseModel },
    h("p", {}, `Under ${analysis.baseModel}: median ${r.lengths.median}, p90 ${r.lengths.p90}, p99 ${r.lengths.p99}, `,
      `longest ${r.lengths.max} tokens; suggested maxSeqLength ${r.suggestedMaxSeqLength}.`),
    h("div", { class: "chart", id: `lengths-${analysis.analysisId}`, role: "img",
               "aria-label": `Row lengths under ${analysis.baseModel}, against maxSeqLength limits` }),
    findings.length ? h("div", { class: "scroll" }, h("h3", {}, `Template findings (${r.findingCount})`), h("table", { class: "findings" },
      h("thead", {}, h("tr", {}, ["Line", "Finding"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, findings.map((f) => h("tr", {},
        h("td", {}, h("button", { type: "button", class: "quiet", onclick: () => toLine(f.line) }, `line ${f.line}`)),
        h("td", { class: "wrap" }, f.message)))))) : h("p", { class: "muted" }, "No template finding."));
}

async function drawLengths(analysis) {
  // the rows' lengths in equal-width bins (GET …/analyses/ID/histogram), the common maxSeqLength limits as lines
  const node = document.getElementById(`lengths-${analysis.analysisId}`);
  let histogram;
  try {
    histogram = await api(`/v1/training/datasets/analyses/${analysis.analysisId}/histogram?bins=40`);
  } catch (error) {
    node.replaceChildren(h("p", { class: "muted" }, error.message));
    return;
  }
  const counts = histogram.bins.map((b) => b.rows);
  node.dataset.rows = String(counts.reduce((a, b) => a + b, 0));
  node.setAttribute("aria-label", `Row lengths under ${analysis.baseModel}: ${histogram.rows} rows, the longest ` +
    `${histogram.longest} tokens; ` + histogram.limits.map((l) => `${l.over} over ${l.limit}`).join(", "));
  if (!window.Plotly) return;
  const top = Math.max(1, ...counts);
  Plotly.react(node, [{ type: "bar", name: "rows", x: histogram.bins.map((b) => (b.from + b.to) / 2),
                        y: counts, width: histogram.width,
                        hovertext: histogram.bins.map((b) => `${b.from}–${b.to} tokens: ${b.rows} rows`),
                        hoverinfo: "text" }],
               { title: { text: "Rows by length (tokens), against maxSeqLength limits" }, height: 280,
                 width: node.clientWidth || undefined, margin: { t: 40, r: 10, b: 40, l: 50 }, bargap: 0.05,
                 xaxis: { title: { text: "tokens" } }, yaxis: { title: { text: "rows" } },
                 shapes: histogram.limits.map((l) => ({ type: "line", x0: l.limit, x1: l.limit, y0: 0, y1: top,
                                                        line: { dash: "dot", width: 1 } })),
                 annotations: histogram.limits.map((l) => ({ x: l.limit, y: top, yanchor: "bottom", showarrow: false,
                                                             text: `${l.limit} (${l.over} over)` })) },
               { displaylogo: false, responsive: true });
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

// --- curations and distillations: jobs that make a dataset ------------------------------------------------------

// What differs between the two: where they read from, the model that decides, and how a rejection is named.
const MAKERS = {
  curations: { title: "Curation", id: (c) => c.curationId, target: (c) => c.dataset,
               reads: (c) => ["Sessions", c.sessions.map((s) => `${short(s.sessionHash)} (${s.source}, ` +
                                                                  `${s.candidates} candidates)`).join(", ")],
               decides: (c) => ["Judge", `${c.judge.reference} · kept at ${c.threshold} or more`],
               what: (r) => `candidate ${r.position} (${r.candidate})` },
  distillations: { title: "Distillation", id: (d) => d.distillationId, target: (d) => d.target,
                   reads: (d) => ["Source", h("a", { href: `#/datasets/${d.source.reference.split(":")[0]}` },
                                             d.source.reference)],
                   decides: (d) => ["Teacher", d.teacher], what: (r) => `decision ${r.decision}` },
};

async function madeDataView(root, id) {
  const kind = MAKERS[root];
  const [item, rejected] = await Promise.all([api(`/v1/training/${root}/${id}`),
                                              api(`/v1/training/${root}/${id}/rejections?limit=20`)]);
  const registered = item.registered ? h("a", { href: `#/datasets/${item.registered.reference.split(":")[0]}` },
                                         item.registered.reference) : undefined;
  const reasons = Object.entries(rejected.rejectedByReason);
  show(h("h1", {}, `${kind.title} ${short(kind.id(item))} `, h("span", { class: "muted" }, `in ${item.project}`)),
       h("section", { class: "panel" }, facts([
         ["Phase", h("span", { class: `phase phase-${item.phase}` }, item.phase)], ["Progress", progressOf(item)],
         kind.reads(item), kind.decides(item), ["Registers", kind.target(item)], ["Registered", registered],
         ["Rejected", reasons.length ? reasons.map(([r, n]) => `${r} ${n}`).join(", ") : "none"],
         ["Failure", item.failureReason || undefined], ["Created", age(item.createdAt)]])),
       h("section", { class: "panel scroll" }, h("h2", {}, "Rejected"), rejected.rejections.length
         ? h("table", { id: "rejections" },
             h("thead", {}, h("tr", {}, ["What", "Reason", "Detail", "Output"].map((c) => h("th", {}, c)))),
             h("tbody", {}, rejected.rejections.map((r) => h("tr", {},
               h("td", {}, kind.what(r)), h("td", {}, r.reason), h("td", { class: "wrap" }, r.detail || "—"),
               h("td", { class: "wrap" }, r.output)))))
         : h("p", { class: "muted" }, "Nothing rejected.")));
}

// --- routing ----------------------------------------------------------------------------------------------------

const ROUTES = [
  [/^#\/sign-in$/, signInView, false],
  [/^#\/projects$/, projectsView, true],
  [/^#\/projects\/([^/]+)$/, (name) => runsView(decodeURIComponent(name)), true],
  [/^#\/runs\/([0-9a-f]+)$/, runView, true],
  [/^#\/projects\/([^/]+)\/evaluations$/, (name) => evaluationsView(decodeURIComponent(name)), true],
  [/^#\/evaluations\/([0-9a-f]+)$/, evaluationView, true],
  [/^#\/projects\/([^/]+)\/comparisons$/, (name) => comparisonsView(decodeURIComponent(name)), true],
  [/^#\/comparisons\/([0-9a-f]+)$/, comparisonView, true],
  [/^#\/projects\/([^/]+)\/pipelines$/, (name) => pipelinesView(decodeURIComponent(name)), true],
  [/^#\/pipelines\/([0-9a-f]+)$/, pipelineView, true],
  [/^#\/(curations|distillations)\/([0-9a-f]+)$/, madeDataView, true],
  [/^#\/datasets$/, datasetsView, true],
  [/^#\/datasets\/([^/]+)\/([^/]+)$/, datasetView, true],
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
