// The dashboard's Reports panel in a real browser on a cluster: a member reports a chat line
// and the room; both show as open reports (the line's text with them, as text, never HTML);
// "warned" + "Resolve" on the line's report resolves it as the dashboard, it leaves the open
// list, the admin API shows its resolution, and the "resolved" view shows it.
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
const ROOM = "reports-1";
// Markup in a member's line: the dashboard must show it as text.
const LINE = "buy <b>cheap</b> coins at spam.example";

before(async () => {
  cluster = await startCluster({ shards: 1 });
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await cluster?.stop();
});

async function member(user) {
  const c = new Client({ url: cluster.gateway.url, token: cluster.token(user), WebSocket });
  await c.connect();
  return { c, room: await c.join(ROOM) };
}

test("the dashboard lists reports and resolves one as the dashboard", async () => {
  const started = Date.now();
  const errors = [];
  const page = await (await browser.newContext({ viewport: { width: 1400, height: 1000 } })).newPage();
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`http://${cluster.gateway.admin}/dashboard`);
  await page.fill("#token", cluster.adminToken);
  await page.click("#signin-button");
  await page.locator("#reports").waitFor({ timeout: T });
  assert.equal(await page.locator("#reports-status").inputValue(), "open");

  // rp-bob says a line, rp-ann reports it and the room itself.
  const ann = await member("rp-ann");
  const bob = await member("rp-bob");
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
  assert.deepEqual(line.slice(1, 7), [ROOM, "rp-ann", "rp-bob", "spam", "selling in the chat", LINE]);
  const room = await cells(roomId);
  assert.deepEqual(room.slice(1, 7), [ROOM, "rp-ann", "the room", "other", "–", "–"]);
  assert.equal(await page.locator("#reports b").count(), 0, "a member's markup is shown as text");
  // Newest first: the room's report came second.
  assert.ok(Number(roomId) > Number(lineId));
  const order = await rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.report));
  assert.ok(order.indexOf(roomId) < order.indexOf(lineId), `order ${order}`);
  assert.ok(await page.locator("#reports-more").isHidden(), "one page: no More");
  assert.equal(await page.locator("#reports-open").textContent(), "2 open", "the backlog");
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
  assert.deepEqual(open.body.reports.map((x) => String(x.id)), [roomId]);
  assert.equal(open.body.open, 1);
  await until(async () => (await page.locator("#reports-open").textContent()) === "1 open", T, "the backlog shrinks");

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
  console.log(`reports browser test: ${((Date.now() - started) / 1000).toFixed(1)} s`);
});
