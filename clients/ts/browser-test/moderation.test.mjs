// Moderation on the dashboard in a real browser on one cluster (one shard), one test each:
//
// Reports: a member reports a chat line and the room; both show as open reports (the line's
// text with them, as text, never HTML); "warned" + "Resolve" on the line's report resolves it
// as the dashboard, it leaves the open list, the admin API shows its resolution, and the
// "resolved" view shows it.
//
// Suspensions: "24 h" + "Suspend" on a report of a chat line suspends the member who said it
// (their client stops on 4003), the report is resolved as "suspended" by the dashboard, and
// "Suspended accounts" lists them with the time it ends; "Lift" lets them connect and join
// again. The form suspends any user by id (one with `+` and `@`, %-encoded in the path), until
// lifted, with a reason shown as text.
//
// Messages: "Message a user" sends a connected member a direct message from the app's own
// account ("official"): their client gets an `im` with `system: true` and the exact text (its
// markup as text), the form says "sent #<id>"; a robot as the recipient is refused (400), said
// in the form, and nothing more reaches the member.
//
// PK between rooms: the form matches two rooms (members in each see `pk.start` naming the
// other room and the match id), the status says "matched <id>, ends <time>"; a room that does
// not exist is refused (404 ROOM_NOT_FOUND, the room named), said in the form.
//
// The tests share the cluster and the browser (each its own browser context), so they keep
// apart: each its own room and user names (rp-*, su-*, msg-*, pk-*), and the reports test counts the
// queue's "N open" backlog from what was open when it began (the suspensions test leaves its
// report of a room open), so none depends on another having run, or not, before it.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { Client } from "../dist/index.js";
import { startCluster } from "../test/cluster.mjs";
import { until } from "../test/node.mjs";
import { launch, shot } from "./browser.mjs";

let cluster;
let browser;
const T = 30_000;
const REPORTS_ROOM = "reports-1";
const SUSPEND_ROOM = "suspend-1";
// Markup in a member's line: the dashboard must show it as text.
const LINE = "buy <b>cheap</b> coins at spam.example";
const DAY_MS = 86_400_000;

before(async () => {
  cluster = await startCluster({ shards: 1 });
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await cluster?.stop();
});

async function member(user, room) {
  const c = new Client({ url: cluster.gateway.url, token: cluster.token(user), WebSocket });
  await c.connect();
  return { c, room: await c.join(room) };
}

/** Every state a client goes through, with its reason. */
function states(c) {
  const seen = [];
  c.on("state", (s) => seen.push(s));
  return seen;
}

/**
 * A dashboard page signed in with the admin token, once `ready` (a selector) shows; `errors`
 * collects the page's uncaught errors.
 */
async function dashboard(ready, height = 1200) {
  const errors = [];
  const context = await browser.newContext({ viewport: { width: 1400, height } });
  const page = await context.newPage();
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`http://${cluster.gateway.admin}/dashboard`);
  await page.fill("#token", cluster.adminToken);
  await page.click("#signin-button");
  await page.locator(ready).waitFor({ timeout: T });
  return { context, page, errors };
}

test("the dashboard lists reports and resolves one as the dashboard", async () => {
  const started = Date.now();
  // The queue's backlog before this test: another test may have left reports open. The
  // "N open" counts below are relative to it (exactly "2 open", "1 open" on an empty queue).
  const queued = await cluster.admin("GET", "/admin/reports?status=open&limit=200");
  assert.equal(queued.status, 200, JSON.stringify(queued.body));
  const openBefore = queued.body.open;
  const idsBefore = new Set(queued.body.reports.map((x) => String(x.id)));
  assert.equal(idsBefore.size, openBefore, JSON.stringify(queued.body));
  const { context, page, errors } = await dashboard("#reports", 1000);
  assert.equal(await page.locator("#reports-status").inputValue(), "open");

  // rp-bob says a line, rp-ann reports it and the room itself.
  const ann = await member("rp-ann", REPORTS_ROOM);
  const bob = await member("rp-bob", REPORTS_ROOM);
  const { seq } = await bob.room.chat(LINE);
  // report.send answers each report's id in the moderation queue.
  const lineReport = await ann.room.report("spam", { seq, text: "selling in the chat" });
  const roomReport = await ann.room.report("other");
  assert.equal(typeof lineReport.id, "number", JSON.stringify(lineReport));
  assert.equal(typeof roomReport.id, "number", JSON.stringify(roomReport));
  const lineId = String(lineReport.id);
  const roomId = String(roomReport.id);

  // Both show within a refresh (every 5 s): the line's with its text, the room's as "the room".
  const rows = page.locator("#reports tbody tr[data-report]");
  const lineRow = page.locator(`#reports tr[data-report="${lineId}"][data-status="open"]`, { hasText: LINE });
  const roomRow = page.locator(`#reports tr[data-report="${roomId}"][data-status="open"]`, { hasText: "the room" });
  await until(async () => (await lineRow.count()) === 1 && (await roomRow.count()) === 1, T, "both reports on the dashboard");
  const cells = async (id) => page.locator(`#reports tr[data-report="${id}"] td`).allTextContents();
  const line = await cells(lineId);
  assert.deepEqual(line.slice(1, 7), [REPORTS_ROOM, "rp-ann", "rp-bob", "spam", "selling in the chat", LINE]);
  const room = await cells(roomId);
  assert.deepEqual(room.slice(1, 7), [REPORTS_ROOM, "rp-ann", "the room", "other", "–", "–"]);
  assert.equal(await page.locator("#reports b").count(), 0, "a member's markup is shown as text");
  // Newest first: the room's report came second.
  assert.ok(Number(roomId) > Number(lineId));
  const order = await rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.report));
  assert.ok(order.indexOf(roomId) < order.indexOf(lineId), `order ${order}`);
  assert.ok(await page.locator("#reports-more").isHidden(), "one page: no More");
  assert.equal(await page.locator("#reports-open").textContent(), `${openBefore + 2} open`, "the backlog");
  await shot(page, "30-dashboard-reports-open");

  // Resolve the line's report as "warned".
  const row = `#reports tr[data-report="${lineId}"]`;
  await page.selectOption(`${row} select[data-report-action]`, "warned");
  await page.locator(`${row} button[data-action="resolve"]`).click();
  await page.locator("#reports-result", { hasText: `report ${lineId}: warned` }).waitFor({ timeout: T });
  await until(async () => (await page.locator(row).count()) === 0, T, "the resolved report out of the open list");
  assert.equal(await page.locator(`#reports tr[data-report="${roomId}"][data-status="open"]`).count(), 1);

  // The admin API has it resolved, by the dashboard.
  const resolved = await cluster.admin("GET", "/admin/reports?status=resolved");
  assert.equal(resolved.status, 200, JSON.stringify(resolved.body));
  const r = resolved.body.reports.find((x) => String(x.id) === lineId);
  assert.ok(r, JSON.stringify(resolved.body));
  assert.equal(r.status, "resolved");
  assert.equal(r.resolution?.action, "warned");
  assert.equal(r.resolution?.by, "dashboard");
  assert.ok(!resolved.body.reports.some((x) => String(x.id) === roomId), "the room's report is still open");
  const open = await cluster.admin("GET", "/admin/reports?status=open");
  assert.deepEqual(open.body.reports.map((x) => String(x.id)).filter((id) => !idsBefore.has(id)), [roomId]);
  assert.equal(open.body.open, openBefore + 1);
  await until(async () => (await page.locator("#reports-open").textContent()) === `${openBefore + 1} open`, T, "the backlog shrinks");

  // The "resolved" view shows it with its resolution and no Resolve button.
  await page.selectOption("#reports-status", "resolved");
  const done = page.locator(`${row}[data-status="resolved"] td[data-resolution="warned"]`, { hasText: "warned by dashboard" });
  await done.waitFor({ timeout: T });
  assert.equal(await page.locator(`${row} button[data-action="resolve"]`).count(), 0);
  assert.equal(await page.locator(`#reports tr[data-report="${roomId}"]`).count(), 0);
  await shot(page, "31-dashboard-reports-resolved");

  assert.deepEqual(errors, [], "no page errors");
  ann.c.close();
  bob.c.close();
  await context.close();
  console.log(`reports browser test: ${((Date.now() - started) / 1000).toFixed(1)} s`);
});

test("the dashboard suspends a reported member, lists the suspension and lifts it", async () => {
  const started = Date.now();
  const { context, page, errors } = await dashboard("#suspensions");
  assert.equal(await page.locator("#suspensions tbody tr").count(), 0);

  // su-bob says a line; su-ann reports it, and the room.
  const ann = await member("su-ann", SUSPEND_ROOM);
  const bob = await member("su-bob", SUSPEND_ROOM);
  const bobStates = states(bob.c);
  const { seq } = await bob.room.chat("free coins at spam.example");
  const lineReport = await ann.room.report("spam", { seq, text: "ads" });
  const roomReport = await ann.room.report("other");
  const id = String(lineReport.id);
  const row = `#reports tr[data-report="${id}"]`;
  await page.locator(`${row} select[data-suspend-for="${id}"]`).waitFor({ timeout: T });
  await page.locator(`#reports tr[data-report="${roomReport.id}"]`).waitFor({ timeout: T });
  assert.equal(await page.locator(`#reports tr[data-report="${roomReport.id}"] button[data-action="suspend"]`).count(), 0, "no Suspend on a report of a room");
  // The Resolve control is still there.
  assert.equal(await page.locator(`${row} button[data-action="resolve"]`).count(), 1);

  // "24 h" + "Suspend".
  await page.selectOption(`${row} select[data-suspend-for="${id}"]`, { label: "24 h" });
  await page.locator(`${row} button[data-action="suspend"]`).click();
  await page.locator("#reports-result", { hasText: `su-bob suspended for 24 h; report ${id}: suspended` }).waitFor({ timeout: T });

  // su-bob's client stops on 4003 (no reconnect).
  await until(() => bob.c.state === "closed", T, "su-bob's client closed");
  const last = bobStates.at(-1);
  assert.match(last.reason ?? "", /4003/, JSON.stringify(bobStates));
  // …and leaves the room at once (not away for the presence grace).
  await until(async () => !(await ann.room.members()).members.some((m) => m.user === "su-bob"), T, "su-bob out of the room");

  // The report is resolved as "suspended" by the dashboard, and out of the open list.
  const resolved = await cluster.admin("GET", "/admin/reports?status=resolved");
  assert.equal(resolved.status, 200, JSON.stringify(resolved.body));
  const r = resolved.body.reports.find((x) => String(x.id) === id);
  assert.equal(r?.resolution?.action, "suspended", JSON.stringify(resolved.body));
  assert.equal(r.resolution.by, "dashboard");
  await until(async () => (await page.locator(`${row}[data-status="open"]`).count()) === 0, T, "the report out of the open list");

  // "Suspended accounts" lists su-bob for 24 h, with the report as the reason.
  const bobRow = page.locator('#suspensions tr[data-user="su-bob"]');
  await bobRow.waitFor({ timeout: T });
  const cells = await bobRow.locator("td").allTextContents();
  assert.equal(cells[0], "su-bob");
  assert.equal(cells[1], `report ${id}: spam`);
  assert.ok(cells[2] !== "until lifted" && cells[2] !== "–", `until: ${cells[2]}`);
  assert.equal(cells[3], "dashboard");
  assert.notEqual(cells[4], "–");
  const api = await cluster.admin("GET", "/admin/suspensions");
  assert.equal(api.body.suspensions.length, 1, JSON.stringify(api.body));
  const s = api.body.suspensions[0];
  assert.deepEqual([s.user, s.suspended, s.reason, s.by], ["su-bob", true, `report ${id}: spam`, "dashboard"]);
  assert.equal(s.until - s.at, DAY_MS, JSON.stringify(s));
  assert.equal(await bobRow.locator("td[data-until]").getAttribute("data-until"), String(s.until));
  await shot(page, "40-dashboard-suspended");

  // "Lift": the list empties, here and in the admin API, and su-bob connects and joins again.
  await bobRow.locator('button[data-action="lift"]').click();
  await page.locator("#suspensions-result", { hasText: "su-bob: suspension lifted" }).waitFor({ timeout: T });
  await until(async () => (await page.locator("#suspensions tbody tr").count()) === 0, T, "the suspensions table empty");
  assert.deepEqual((await cluster.admin("GET", "/admin/suspensions")).body, { suspensions: [] });
  const again = await member("su-bob", SUSPEND_ROOM);
  assert.equal(again.c.state, "open");
  assert.equal(again.room.state, "joined");

  // The form: a connected user suspended until lifted; the reason's markup shown as text.
  const EVE = "su-eve+1@example.com";
  const eve = new Client({ url: cluster.gateway.url, token: cluster.token(EVE), WebSocket });
  await eve.connect();
  await page.fill("#suspend-user", EVE);
  await page.selectOption("#suspend-for", { label: "until lifted" });
  await page.fill("#suspend-reason", "<b>ads</b> in every room");
  await page.click("#suspend-button");
  await page.locator("#suspensions-result", { hasText: `${EVE} suspended until lifted` }).waitFor({ timeout: T });
  const eveRow = page.locator(`#suspensions tr[data-user="${EVE}"]`);
  await eveRow.waitFor({ timeout: T });
  assert.deepEqual((await eveRow.locator("td").allTextContents()).slice(0, 4), [EVE, "<b>ads</b> in every room", "until lifted", "dashboard"]);
  assert.equal(await page.locator("#suspensions b").count(), 0, "a reason is shown as text");
  assert.equal(await page.locator("#suspend-user").inputValue(), "", "the form is cleared");
  await until(() => eve.state === "closed", T, "the form's user's client closed");
  const one = await cluster.admin("GET", `/admin/users/${encodeURIComponent(EVE)}/suspension`);
  assert.deepEqual([one.body.user, one.body.suspended, one.body.until, one.body.by], [EVE, true, null, "dashboard"]);
  await shot(page, "41-dashboard-suspended-form");

  assert.deepEqual(errors, [], "no page errors");
  ann.c.close();
  again.c.close();
  await context.close();
  console.log(`suspensions browser test: ${((Date.now() - started) / 1000).toFixed(1)} s`);
});

test("the dashboard sends a user a direct message from the app's account", async () => {
  const started = Date.now();
  const { context, page, errors } = await dashboard("#message-form");
  assert.equal(await page.locator("#message-from").inputValue(), "official", "from defaults to the app's account");

  // msg-amy is connected and counts every direct message.
  const USER = "msg-amy";
  const amy = new Client({ url: cluster.gateway.url, token: cluster.token(USER), WebSocket });
  const ims = [];
  amy.on("im", (d) => ims.push(d));
  await amy.connect();

  // Markup in the text: it must arrive as sent, and the page must not render it.
  const TEXT = "welcome <b>hi</b> & thanks";
  await page.fill("#message-user", USER);
  await page.fill("#message-from", "official");
  await page.fill("#message-text", TEXT);
  await page.click("#message-send");
  await page.locator("#message-status", { hasText: "sent #" }).waitFor({ timeout: T });
  const status = await page.locator("#message-status").textContent();
  const m = /^sent #(\d+)$/.exec(status);
  assert.ok(m, status);
  assert.equal(await page.locator("#message-status").getAttribute("data-status"), "200");
  await until(() => ims.length === 1, T, "msg-amy's im");
  const im = ims[0];
  assert.equal(im.system, true, JSON.stringify(im));
  assert.equal(im.from, "official");
  assert.equal(im.to, USER);
  assert.equal(im.text, TEXT);
  assert.equal(im.type, undefined, "no type given");
  assert.equal(String(im.id), m[1], "the status names the message's id");
  assert.equal(await page.locator("#message-form b, #message-status b").count(), 0, "the text is never HTML");
  await shot(page, "42-dashboard-message-sent");

  // A robot takes no direct messages: 400, said in the form; nothing more reaches msg-amy.
  await page.fill("#message-user", "bot:x");
  await page.fill("#message-text", "hello robot");
  await page.click("#message-send");
  const refused = page.locator('#message-status[data-status="400"]');
  await refused.waitFor({ timeout: T });
  const err = await refused.textContent();
  assert.match(err, /^message bot:x: 400 /, err);
  assert.doesNotMatch(err, /sent #/, err);
  assert.equal(await page.locator("#message-status").getAttribute("data-status"), "400");
  await shot(page, "43-dashboard-message-refused");
  // A next message to msg-amy is the next one she gets: the refused one reached nobody.
  await page.fill("#message-user", "msg-amy");
  await page.fill("#message-text", "after the refusal");
  await page.click("#message-send");
  await until(() => ims.length >= 2, T, "the next message arrives");
  assert.deepEqual(
    ims.map((m) => m.text),
    [TEXT, "after the refusal"],
    JSON.stringify(ims),
  );

  assert.deepEqual(errors, [], "no page errors");
  amy.close();
  await context.close();
  console.log(`messages browser test: ${((Date.now() - started) / 1000).toFixed(1)} s`);
});

test("the dashboard matches two rooms in a PK", async () => {
  const { context, page, errors } = await dashboard("#pk-form");
  const ann = await member("pk-ann", "pk-a");
  const bob = await member("pk-bob", "pk-b");
  const starts = [ann.room.next("pk.start", undefined, T), bob.room.next("pk.start", undefined, T)];
  await page.fill("#pk-room-a", "pk-a");
  await page.fill("#pk-room-b", "pk-b");
  await page.fill("#pk-seconds", "60");
  await page.fill("#pk-link", "dash-match");
  await page.click("#pk-start");
  const ok = page.locator('#pk-status[data-status="200"]', { hasText: /^matched dash-match, ends / });
  await ok.waitFor({ timeout: T });
  const [sa, sb] = await Promise.all(starts);
  assert.deepEqual([sa.vs, sb.vs], [{ room: "pk-b", link: "dash-match" }, { room: "pk-a", link: "dash-match" }]);
  await shot(page, "44-dashboard-pk-matched");

  // Ended through the admin API (both rooms end it), then a missing room: 404, said with its code and room.
  const ends = [ann.room.next("pk.end", undefined, T), bob.room.next("pk.end", undefined, T)];
  assert.equal((await cluster.admin("DELETE", "/admin/rooms/pk-a/pk")).status, 200);
  await Promise.all(ends);
  await page.fill("#pk-room-b", "pk-nowhere");
  await page.click("#pk-start");
  const refused = page.locator('#pk-status[data-status="404"]');
  await refused.waitFor({ timeout: T });
  assert.match(await refused.textContent(), /^PK pk-a vs pk-nowhere: 404 .*\(ROOM_NOT_FOUND, room pk-nowhere\)$/);
  await shot(page, "45-dashboard-pk-refused");

  assert.deepEqual(errors, [], "no page errors");
  ann.c.close();
  bob.c.close();
  await context.close();
});
