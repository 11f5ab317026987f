export {};
// The operator dashboard served by every node at `/dashboard` on its admin port: nodes with
// weights and health, the ring, rooms and their leases per shard, the rebalance, live charts
// from this node's `/metrics`, drain / weight / move buttons that call the admin API, and
// the members' reports with a "Resolve" per open one and a "Suspend" for the account reported,
// the suspended accounts with a "Lift" each, a form that sends a user a direct message
// from the app's own account, and a form that matches two rooms in a PK (section 16.6 of
// PROTOCOL.md, `POST /admin/pk`).
// The admin token is typed in and kept in this script's memory only.

const $ = <T extends HTMLElement = HTMLElement>(id: string): T => document.getElementById(id) as T;
let token = "";
let timer: ReturnType<typeof setTimeout> | null = null;
let shards: string[] = [];

function el<K extends keyof HTMLElementTagNameMap>(tag: K, text?: string, cls?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

async function api(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const r = await fetch(path, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  const text = await r.text();
  let json: any = text;
  try {
    json = JSON.parse(text);
  } catch {
    /* text */
  }
  return { status: r.status, json };
}

function setStatus(state: string, text: string): void {
  const s = $("status");
  s.dataset.state = state;
  s.textContent = text;
}

async function act(what: string, method: string, path: string, body?: unknown): Promise<void> {
  const r = await api(method, path, body);
  const res = $("result");
  res.dataset.status = String(r.status);
  res.textContent = `${what}: ${r.status} ${typeof r.json === "string" ? r.json : JSON.stringify(r.json)}`;
  void refresh();
}

function button(label: string, f: () => void, cls = "secondary"): HTMLButtonElement {
  const b = el("button", label, cls);
  b.dataset.action = label.toLowerCase();
  b.onclick = f;
  return b;
}

/** What the nodes table shows last: it is rebuilt only when that changes. */
let shownNodes = "";

function renderNodes(nodes: any[], version: unknown): void {
  // Rebuilding the rows on every refresh would replace a button under the operator's pointer
  // (a click between its press and release is lost) and a weight being typed in.
  const shown = JSON.stringify([version, nodes.map((n) => [n.id, n.role, n.weight, n.health, n.rooms_owned, n.sessions])]);
  if (shown === shownNodes) return;
  shownNodes = shown;
  $("ring-version").textContent = version !== undefined ? `ring version ${version}` : "standalone";
  const body = $("nodes").querySelector("tbody")!;
  body.replaceChildren();
  for (const n of nodes) {
    const tr = el("tr");
    tr.dataset.node = n.id;
    tr.append(el("td", n.id), el("td", n.role ?? ""), el("td", n.weight === undefined ? "–" : String(n.weight)));
    const h = el("td", n.health ?? "", n.health === "live" ? "live" : "stale");
    tr.append(h, el("td", n.rooms_owned == null ? "–" : String(n.rooms_owned)), el("td", n.sessions == null ? "–" : String(n.sessions)));
    const actions = el("td");
    if (n.role === "shard") {
      actions.append(button("Drain", () => void act(`drain ${n.id}`, "POST", `/admin/nodes/${encodeURIComponent(n.id)}/drain`)));
      const w = el("input");
      w.type = "number";
      w.min = "0";
      w.value = String(n.weight ?? 1);
      w.style.width = "4em";
      w.dataset.weight = n.id;
      actions.append(" ", w, " ", button("Weight", () => void act(`weight ${n.id}`, "PUT", `/admin/nodes/${encodeURIComponent(n.id)}/weight`, { weight: Number(w.value) })));
    }
    tr.append(actions);
    body.append(tr);
  }
}

function renderRing(ring: any): void {
  const body = $("ring").querySelector("tbody")!;
  body.replaceChildren();
  const list: any[] = ring?.nodes ?? [];
  for (const s of list) body.append(rowOf([s.id, s.weight, `${s.vnodes}${s.on_ring === false ? " (off the ring)" : ""}`]));
  const pins = ring?.pins ? Object.entries(ring.pins) : [];
  $("pins").textContent = pins.length ? `pins: ${pins.map(([r, s]) => `${r} → ${s}`).join(", ")}` : "no pins";
}

function rowOf(cells: unknown[]): HTMLTableRowElement {
  const tr = el("tr");
  for (const c of cells) tr.append(el("td", c == null ? "–" : String(c)));
  return tr;
}

function renderRebalance(rb: any): void {
  $("rb-planned").textContent = String(rb.planned ?? 0);
  $("rb-inflight").textContent = String(rb.in_flight ?? 0);
  $("rb-done").textContent = String(rb.done ?? 0);
  $("rb-failed").textContent = String(rb.failed ?? 0);
  const total = (rb.planned ?? 0) + (rb.in_flight ?? 0) + (rb.done ?? 0);
  ($("rb-bar") as HTMLElement).style.width = total ? `${Math.round((100 * (rb.done ?? 0)) / total)}%` : "0%";
  const moves = $("rb-moves");
  moves.replaceChildren();
  for (const n of rb.nodes ?? []) {
    const r = n.rebalance ?? {};
    for (const m of (r.in_flight ?? []).slice(0, 20)) moves.append(el("li", `${n.node}: moving ${describe(m)}`));
    for (const m of (r.planned ?? []).slice(0, 20)) moves.append(el("li", `${n.node}: planned ${describe(m)}`));
  }
}

function describe(m: unknown): string {
  if (typeof m === "string") return m;
  if (m && typeof m === "object") {
    const o = m as Record<string, unknown>;
    return `${o.room ?? JSON.stringify(o)}${o.to ? ` → ${o.to}` : ""}`;
  }
  return String(m);
}

function renderLeases(data: any): void {
  const body = $("leases").querySelector("tbody")!;
  body.replaceChildren();
  for (const s of data.shards ?? []) {
    for (const r of s.rooms ?? []) {
      const tr = rowOf([r.room, s.node, r.fence]);
      tr.dataset.room = r.room;
      tr.dataset.shard = s.node;
      const cell = el("td");
      const pick = el("select");
      for (const id of shards.filter((x) => x !== s.node)) pick.append(new Option(id, id));
      const path = `/admin/rooms/${encodeURIComponent(r.room)}`;
      if (pick.options.length) {
        cell.append(pick, " ", button("Move", () => void act(`move ${r.room}`, "POST", `${path}/move`, { to: pick.value })), " ");
      }
      // The platform closes a room (its owner cannot reopen it) or reopens one.
      cell.append(
        button("Close", () => {
          const reason = prompt(`Close ${r.room}: the reason joiners are told`, "closed by the platform");
          if (reason !== null) void act(`close ${r.room}`, "POST", `${path}/close`, { reason });
        }),
        " ",
        button("Reopen", () => void act(`reopen ${r.room}`, "POST", `${path}/open`)),
      );
      tr.append(cell);
      body.append(tr);
    }
    if ((s.running ?? 0) > (s.rooms ?? []).length) body.append(rowOf([`… ${s.running - s.rooms.length} more`, s.node, "", ""]));
  }
}

// ---- the moderation queue: members' reports (newest first), resolved from here ----

const ACTIONS = ["dismissed", "warned", "removed", "banned"];
/** Pages of reports shown ("More" adds one); each refresh reloads that many. */
let reportPages = 1;
/** Counts loads: only the latest draws, so a slow refresh never overwrites a newer list. */
let reportsLoad = 0;
/** The action picked per open report: kept across redraws (the list is redrawn every 5 s). */
const picked = new Map<number, string>();
/** The 5 s reload of reports and suspensions. */
let moderationTimer: ReturnType<typeof setTimeout> | null = null;

/** Loads `reportPages` pages of the chosen status, following `next`, and draws them. */
async function loadReports(): Promise<void> {
  const load = ++reportsLoad;
  const status = $<HTMLSelectElement>("reports-status").value;
  const list: any[] = [];
  let next: unknown = null;
  let open: unknown = null;
  try {
    for (let page = 0; page < reportPages && (page === 0 || next != null); page++) {
      const before = page ? `&before=${encodeURIComponent(String(next))}` : "";
      const r = await api("GET", `/admin/reports?status=${encodeURIComponent(status)}${before}`);
      if (load !== reportsLoad) return;
      if (r.status === 401) {
        stop("the admin token was refused");
        return;
      }
      if (r.status !== 200) {
        $("reports-result").textContent = `reports: ${r.status} ${errorOf(r.json)}`;
        return;
      }
      list.push(...(r.json?.reports ?? []));
      next = r.json?.next ?? null;
      open = r.json?.open ?? open;
    }
  } catch (e) {
    if (load === reportsLoad) $("reports-result").textContent = `reports unreachable: ${String(e)}`;
    return;
  }
  renderReports(list, next);
  // The whole queue's backlog, whatever the status shown.
  $("reports-open").textContent = typeof open === "number" ? `${open} open` : "";
}

function renderReports(list: any[], next: unknown): void {
  $("reports").querySelector("tbody")!.replaceChildren(...list.map(reportRow));
  $("reports-more").hidden = next == null;
}

/** One report; every cell is set as text (the reason, words and line come from members). */
function reportRow(r: any): HTMLTableRowElement {
  const tr = rowOf([when(r.at), r.room, r.reporter, r.user ?? "the room", r.reason, r.text, r.line?.text]);
  tr.dataset.report = String(r.id);
  tr.dataset.status = String(r.status);
  if (r.line?.from != null) tr.cells[6].title = `said by ${r.line.from}`;
  const cell = el("td");
  if (r.status === "open") {
    const pick = el("select");
    pick.dataset.reportAction = String(r.id);
    for (const a of ACTIONS) pick.append(new Option(a, a));
    pick.value = picked.get(r.id) ?? ACTIONS[0];
    pick.onchange = () => picked.set(r.id, pick.value);
    const go = button("Resolve", () => {
      go.disabled = true;
      void resolveReport(r.id, pick.value);
    });
    cell.append(pick, " ", go);
  } else {
    cell.textContent = resolution(r.resolution);
    if (r.resolution?.action != null) cell.dataset.resolution = String(r.resolution.action);
  }
  tr.append(cell, suspendCell(r));
  return tr;
}

/** A duration and a "Suspend" for the account a report names (none for a report on a room). */
function suspendCell(r: any): HTMLTableCellElement {
  const cell = el("td");
  if (r.user == null) return cell;
  const pick = durationSelect();
  pick.dataset.suspendFor = String(r.id);
  pick.value = suspendPicked.get(r.id) ?? DURATIONS[0][1];
  pick.onchange = () => suspendPicked.set(r.id, pick.value);
  const go = button("Suspend", () => {
    go.disabled = true;
    void suspendFromReport(r, pick.value);
  });
  cell.append(pick, " ", go);
  return cell;
}

function resolution(res: any): string {
  if (!res) return "–";
  return `${res.action} by ${res.by ?? "–"} · ${when(res.at)}${res.note ? ` · ${res.note}` : ""}`;
}

function when(ms: unknown): string {
  return typeof ms === "number" ? new Date(ms).toLocaleString() : "–";
}

function errorOf(json: any): string {
  return typeof json === "string" ? json : (json?.error ?? JSON.stringify(json));
}

/** Resolves one report as the dashboard, says how it went, and reloads the list at once. */
async function resolveReport(id: number, action: string): Promise<void> {
  const r = await api("POST", `/admin/reports/${encodeURIComponent(String(id))}/resolve`, { action, by: "dashboard" });
  const res = $("reports-result");
  res.dataset.status = String(r.status);
  if (r.status === 200) res.textContent = `report ${id}: ${action}`;
  // Another moderator was first: say what they decided.
  else if (r.status === 409) res.textContent = `report ${id} was resolved already: ${resolution(r.json?.report?.resolution)}`;
  else res.textContent = `resolve report ${id}: ${r.status} ${errorOf(r.json)}`;
  if (r.status === 200 || r.status === 409) picked.delete(id);
  await loadReports();
}

/**
 * Suspends the account a report names, with the report as the reason, then resolves the
 * report as "suspended" (409: someone resolved it first, which is fine) and reloads both lists.
 */
async function suspendFromReport(r: any, seconds: string): Promise<void> {
  const res = $("reports-result");
  const s = await suspend(String(r.user), seconds, `report ${r.id}: ${r.reason}`);
  res.dataset.status = String(s.status);
  if (s.status !== 200) {
    res.textContent = `suspend ${r.user}: ${s.status} ${errorOf(s.json)}`;
  } else {
    const done = `${r.user} suspended ${durationLabel(seconds)}`;
    const d = await api("POST", `/admin/reports/${encodeURIComponent(String(r.id))}/resolve`, { action: "suspended", by: "dashboard" });
    if (d.status === 200) res.textContent = `${done}; report ${r.id}: suspended`;
    else if (d.status === 409) res.textContent = `${done}; report ${r.id} was resolved already: ${resolution(d.json?.report?.resolution)}`;
    else res.textContent = `${done}; resolve report ${r.id}: ${d.status} ${errorOf(d.json)}`;
    if (d.status === 200 || d.status === 409) picked.delete(r.id);
    suspendPicked.delete(r.id);
  }
  await loadModeration();
}

// ---- suspended accounts: listed, lifted, and suspended by id ----

/** The durations offered: [label, seconds] ("": until lifted). */
const DURATIONS: [string, string][] = [
  ["24 h", "86400"],
  ["7 days", "604800"],
  ["until lifted", ""],
];
/** The duration picked per report, kept across redraws like `picked`. */
const suspendPicked = new Map<number, string>();
let suspensionsLoad = 0;

function durationSelect(pick = el("select")): HTMLSelectElement {
  for (const [label, seconds] of DURATIONS) pick.append(new Option(label, seconds));
  return pick;
}

function durationLabel(seconds: string): string {
  const d = DURATIONS.find(([, s]) => s === seconds);
  return d && d[1] ? `for ${d[0]}` : "until lifted";
}

/** `text` fit for a suspension's reason: one line (no control or bidi characters), 200 at most. */
function reasonOf(text: string): string {
  const line = text.replace(/[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g, " ").trim();
  // Counted in characters (code points), as the node counts them.
  return Array.from(line).slice(0, 200).join("");
}

/** PUTs a suspension of `user` by the dashboard; `seconds` "" is until lifted. */
function suspend(user: string, seconds: string, reason: string): Promise<{ status: number; json: any }> {
  const why = reasonOf(reason);
  const body = { ...(seconds ? { seconds: Number(seconds) } : {}), ...(why ? { reason: why } : {}), by: "dashboard" };
  return api("PUT", `/admin/users/${encodeURIComponent(user)}/suspension`, body);
}

/** Loads every suspension that holds now (newest first) and draws them. */
async function loadSuspensions(): Promise<void> {
  const load = ++suspensionsLoad;
  let r: { status: number; json: any };
  try {
    r = await api("GET", "/admin/suspensions");
  } catch (e) {
    if (load === suspensionsLoad) $("suspensions-result").textContent = `suspensions unreachable: ${String(e)}`;
    return;
  }
  if (load !== suspensionsLoad) return;
  if (r.status === 401) {
    stop("the admin token was refused");
    return;
  }
  if (r.status !== 200) {
    $("suspensions-result").textContent = `suspensions: ${r.status} ${errorOf(r.json)}`;
    return;
  }
  $("suspensions").querySelector("tbody")!.replaceChildren(...(r.json?.suspensions ?? []).map(suspensionRow));
}

/** One suspension, every cell as text (the user id and reason may come from members). */
function suspensionRow(s: any): HTMLTableRowElement {
  const tr = rowOf([s.user, s.reason, s.until == null ? "until lifted" : when(s.until), s.by, when(s.at)]);
  tr.dataset.user = String(s.user);
  if (s.until != null) tr.cells[2].dataset.until = String(s.until);
  const cell = el("td");
  const go = button("Lift", () => {
    go.disabled = true;
    void lift(String(s.user));
  });
  cell.append(go);
  tr.append(cell);
  return tr;
}

/** Lifts a suspension, says how it went, and reloads the list. */
async function lift(user: string): Promise<void> {
  const r = await api("DELETE", `/admin/users/${encodeURIComponent(user)}/suspension`);
  const res = $("suspensions-result");
  res.dataset.status = String(r.status);
  if (r.status === 200) res.textContent = `${user}: suspension lifted`;
  // Lifted by someone else, or its time ran out.
  else if (r.status === 404) res.textContent = `${user} was not suspended any more`;
  else res.textContent = `lift ${user}: ${r.status} ${errorOf(r.json)}`;
  await loadSuspensions();
}

/** The form: suspends any user by id. */
async function suspendByForm(): Promise<void> {
  const input = $<HTMLInputElement>("suspend-user");
  const user = input.value.trim();
  if (!user) return;
  const seconds = $<HTMLSelectElement>("suspend-for").value;
  const reason = $<HTMLInputElement>("suspend-reason");
  const r = await suspend(user, seconds, reason.value);
  const res = $("suspensions-result");
  res.dataset.status = String(r.status);
  if (r.status === 200) {
    res.textContent = `${user} suspended ${durationLabel(seconds)}`;
    input.value = "";
    reason.value = "";
  } else {
    res.textContent = `suspend ${user}: ${r.status} ${errorOf(r.json)}`;
  }
  await loadSuspensions();
}

durationSelect($<HTMLSelectElement>("suspend-for"));
$("suspend-form").onsubmit = (ev) => {
  ev.preventDefault();
  void suspendByForm();
};

// ---- a direct message to one user from the app's own account ----

/**
 * A fresh idempotency key: every Send is a new message. `crypto.randomUUID` needs a secure
 * context (https or localhost); a dashboard on plain http elsewhere gets 128 random bits.
 */
function freshReqId(): string {
  if (typeof crypto.randomUUID === "function") return crypto.randomUUID();
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The form: sends a user a direct message as `from` and says how it went, as text. */
async function messageByForm(): Promise<void> {
  const user = $<HTMLInputElement>("message-user").value.trim();
  const from = $<HTMLInputElement>("message-from").value.trim();
  const text = $<HTMLInputElement>("message-text");
  const type = $<HTMLInputElement>("message-type").value.trim();
  if (!user || !from || !text.value) return;
  const send = $<HTMLButtonElement>("message-send");
  const res = $("message-status");
  send.disabled = true;
  delete res.dataset.status;
  res.textContent = `sending to ${user}…`;
  let r: { status: number; json: any };
  try {
    const body = { from, text: text.value, req_id: freshReqId(), ...(type ? { type } : {}) };
    r = await api("POST", `/admin/users/${encodeURIComponent(user)}/messages`, body);
  } catch (e) {
    res.textContent = `message ${user}: unreachable: ${String(e)}`;
    return;
  } finally {
    send.disabled = false;
  }
  if (r.status === 401) {
    stop("the admin token was refused");
    return;
  }
  res.dataset.status = String(r.status);
  if (r.status === 200) {
    res.textContent = `sent #${r.json?.id}`;
    text.value = "";
  } else {
    // 400: a bad field or recipient; 409: BLOCKED or IDEMPOTENCY_CONFLICT; 503: retry.
    const code = r.json && typeof r.json === "object" && r.json.code ? ` (${r.json.code})` : "";
    res.textContent = `message ${user}: ${r.status} ${errorOf(r.json)}${code}`;
  }
}

$("message-form").onsubmit = (ev) => {
  ev.preventDefault();
  void messageByForm();
};

// ---- a PK between two rooms (section 16.6): the app's backend matches them ----

/** The form: matches two rooms in a PK and says how it went, as text. */
async function pkByForm(): Promise<void> {
  const a = $<HTMLInputElement>("pk-room-a").value.trim();
  const b = $<HTMLInputElement>("pk-room-b").value.trim();
  const seconds = Number($<HTMLInputElement>("pk-seconds").value);
  const link = $<HTMLInputElement>("pk-link").value.trim();
  if (!a || !b) return;
  const start = $<HTMLButtonElement>("pk-start");
  const res = $("pk-status");
  start.disabled = true;
  delete res.dataset.status;
  res.textContent = `matching ${a} and ${b}…`;
  let r: { status: number; json: any };
  try {
    const body = { rooms: [a, b], ...(Number.isFinite(seconds) && seconds > 0 ? { seconds } : {}), ...(link ? { link } : {}) };
    r = await api("POST", "/admin/pk", body);
  } catch (e) {
    res.textContent = `PK ${a} vs ${b}: unreachable: ${String(e)}`;
    return;
  } finally {
    start.disabled = false;
  }
  if (r.status === 401) {
    stop("the admin token was refused");
    return;
  }
  res.dataset.status = String(r.status);
  if (r.status === 200) {
    res.textContent = `matched ${r.json?.link}, ends ${when(r.json?.ends_at)}`;
  } else {
    // 400: a bad body; 404: ROOM_NOT_FOUND; 409: PK_ON (a PK is on in that room).
    const j = r.json && typeof r.json === "object" ? r.json : {};
    const code = j.code ? ` (${j.code}${j.room ? `, room ${j.room}` : ""})` : "";
    res.textContent = `PK ${a} vs ${b}: ${r.status} ${errorOf(r.json)}${code}`;
  }
}

$("pk-form").onsubmit = (ev) => {
  ev.preventDefault();
  void pkByForm();
};

/** Reports and suspensions, loaded together. */
function loadModeration(): Promise<unknown> {
  return Promise.all([loadReports(), loadSuspensions()]);
}

/** The next load of both 5 s after this one ends, for as long as sign-in `session` lasts. */
function scheduleModeration(session: number): void {
  moderationTimer = setTimeout(() => {
    void loadModeration().finally(() => {
      if (session === signedIn && moderationTimer !== null) scheduleModeration(session);
    });
  }, 5000);
}

$("reports-status").onchange = () => {
  reportPages = 1;
  void loadReports();
};
$("reports-more").onclick = () => {
  reportPages++;
  void loadReports();
};

// ---- live charts from the Prometheus text of this node's /metrics ----

interface Series {
  label: string;
  unit: string;
  /** From the parsed samples: a value, or a running total to turn into a rate. */
  read: (m: Map<string, number>) => number | undefined;
  rate?: boolean;
}

const sum = (m: Map<string, number>, name: string): number | undefined => {
  let total: number | undefined;
  for (const [k, v] of m) {
    if (k === name || k.startsWith(name + "{")) total = (total ?? 0) + v;
  }
  return total;
};
const p99 = (m: Map<string, number>, name: string): number | undefined => {
  let worst: number | undefined;
  for (const [k, v] of m) {
    if (k.startsWith(name + "{") && k.includes('quantile="0.99"') && Number.isFinite(v)) worst = Math.max(worst ?? 0, v);
  }
  return worst === undefined ? undefined : worst * 1000;
};

const SERIES: Series[] = [
  { label: "connections", unit: "", read: (m) => sum(m, "chorus_gateway_connections") },
  { label: "deliveries/s", unit: "/s", read: (m) => sum(m, "chorus_gateway_frames_out_total"), rate: true },
  { label: "requests/s", unit: "/s", read: (m) => sum(m, "chorus_gateway_requests_total"), rate: true },
  { label: "gift settles/s", unit: "/s", read: (m) => sum(m, "chorus_gifts_settled_total"), rate: true },
  { label: "rooms running", unit: "", read: (m) => sum(m, "chorus_shard_rooms_running") },
  { label: "handoff p99", unit: " ms", read: (m) => p99(m, "chorus_shard_handoff_seconds") },
  { label: "ledger commit p99", unit: " ms", read: (m) => p99(m, "chorus_ledger_group_commit_seconds") },
  { label: "resident memory", unit: " MB", read: (m) => ((v) => (v === undefined ? v : v / 1e6))(sum(m, "process_resident_memory_bytes")) },
];
const history = new Map<string, number[]>();
const last = new Map<string, { v: number; t: number }>();

function parseMetrics(text: string): Map<string, number> {
  const m = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const i = line.lastIndexOf(" ");
    const v = Number(line.slice(i + 1));
    if (Number.isFinite(v)) m.set(line.slice(0, i), v);
  }
  return m;
}

/** Whose metrics the charts show ("": the node serving the page). */
let metricsNode = "";

function renderMetricsChoice(nodes: any[]): void {
  const pick = $<HTMLSelectElement>("metrics-node");
  const ids = nodes.map((n) => String(n.id));
  const have = [...pick.options].map((o) => o.value).slice(1);
  if (have.join() !== ids.join()) {
    pick.replaceChildren(new Option("this node", ""), ...ids.map((id) => new Option(id, id)));
    pick.value = ids.includes(metricsNode) ? metricsNode : "";
  }
  pick.onchange = () => {
    metricsNode = pick.value;
    history.clear();
    last.clear();
    void charts();
  };
}

async function charts(): Promise<void> {
  // Through the admin API, so any node's metrics come from the port that served the page.
  const q = metricsNode ? `?node=${encodeURIComponent(metricsNode)}` : "";
  const r = await fetch(`/admin/metrics${q}`, { headers: { authorization: `Bearer ${token}` } });
  if (!r.ok) return;
  const m = parseMetrics(await r.text());
  const now = Date.now();
  const box = $("charts");
  box.replaceChildren();
  for (const s of SERIES) {
    let v = s.read(m);
    if (s.rate && v !== undefined) {
      const prev = last.get(s.label);
      last.set(s.label, { v, t: now });
      v = prev && now > prev.t ? Math.max(0, ((v - prev.v) * 1000) / (now - prev.t)) : undefined;
    }
    const h = history.get(s.label) ?? [];
    if (v !== undefined) h.push(v);
    while (h.length > 60) h.shift();
    history.set(s.label, h);
    box.append(chart(s, h));
  }
}

function chart(s: Series, h: number[]): HTMLElement {
  const c = el("div", undefined, "chart");
  c.dataset.series = s.label;
  c.append(el("div", s.label, "note"));
  const cur = h.at(-1);
  c.append(el("div", cur === undefined ? "–" : `${cur >= 100 ? cur.toFixed(0) : cur.toFixed(1)}${s.unit}`, "v"));
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 60 20");
  svg.setAttribute("preserveAspectRatio", "none");
  const max = Math.max(1e-9, ...h);
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", h.map((v, i) => `${i + 60 - h.length},${(20 - (18 * v) / max - 1).toFixed(2)}`).join(" "));
  line.setAttribute("vector-effect", "non-scaling-stroke");
  svg.append(line);
  c.append(svg);
  return c;
}

async function refresh(): Promise<void> {
  try {
    const [nodes, ring, rb, leases] = await Promise.all([
      api("GET", "/admin/nodes"),
      api("GET", "/admin/ring"),
      api("GET", "/admin/rebalance"),
      api("GET", "/admin/leases"),
    ]);
    if (nodes.status === 401) {
      stop("the admin token was refused");
      return;
    }
    const list: any[] = nodes.json?.nodes ?? [];
    shards = list.filter((n) => n.role === "shard").map((n) => n.id);
    renderNodes(list, nodes.json?.version);
    renderMetricsChoice(list);
    renderRing(ring.status === 200 ? ring.json : null);
    if (rb.status === 200) renderRebalance(rb.json);
    if (leases.status === 200) renderLeases(leases.json);
    await charts();
    setStatus("open", `live · ${new Date().toLocaleTimeString()}`);
  } catch (e) {
    setStatus("reconnecting", `unreachable: ${String(e)}`);
  }
}

function stop(why: string): void {
  if (timer) clearTimeout(timer);
  timer = null;
  if (moderationTimer) clearTimeout(moderationTimer);
  moderationTimer = null;
  reportsLoad++;
  suspensionsLoad++;
  $("reports").querySelector("tbody")!.replaceChildren();
  $("suspensions").querySelector("tbody")!.replaceChildren();
  shownNodes = "";
  signedIn++;
  token = "";
  $("dash").hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = why;
  setStatus("closed", "signed out");
}

async function signIn(): Promise<void> {
  const input = $<HTMLInputElement>("token");
  token = input.value.trim();
  input.value = "";
  const r = await api("GET", "/admin/nodes");
  if (r.status !== 200) {
    stop(r.status === 401 ? "the admin token was refused" : `the node answered ${r.status}`);
    return;
  }
  $("signin").hidden = true;
  $("dash").hidden = false;
  $("signin-error").textContent = "";
  reportPages = 1;
  await Promise.all([refresh(), loadModeration()]);
  schedule(++signedIn);
  scheduleModeration(signedIn);
}

/** Counts sign-ins: a refresh that ends after a sign-out (or a new sign-in) schedules nothing. */
let signedIn = 0;

/** The next refresh a second after this one ends: a slow node never has two in flight. */
function schedule(session: number): void {
  timer = setTimeout(() => {
    void refresh().finally(() => {
      if (session === signedIn && timer !== null) schedule(session);
    });
  }, 1000);
}

$("signin-form").onsubmit = (ev) => {
  ev.preventDefault();
  void signIn();
};
