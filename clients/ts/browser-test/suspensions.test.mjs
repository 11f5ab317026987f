// Account suspensions on the dashboard in a real browser on a cluster: "24 h" + "Suspend" on
// a report of a chat line suspends the member who said it (their client stops on 4003), the
// report is resolved as "suspended" by the dashboard, and "Suspended accounts" lists them with
// the time it ends; "Lift" lets them connect and join again. The form suspends any user by id
// (one with `+` and `@`, %-encoded in the path), until lifted, with a reason shown as text.
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
const ROOM = "suspend-1";
const DAY_MS = 86_400_000;

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

/** Every state a client goes through, with its reason. */
function states(c) {
  const seen = [];
  c.on("state", (s) => seen.push(s));
  return seen;
}

test("the dashboard suspends a reported member, lists the suspension and lifts it", async () => {
  const started = Date.now();
  const errors = [];
  const page = await (await browser.newContext({ viewport: { width: 1400, height: 1200 } })).newPage();
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`http://${cluster.gateway.admin}/dashboard`);
  await page.fill("#token", cluster.adminToken);
  await page.click("#signin-button");
  await page.locator("#suspensions").waitFor({ timeout: T });
  assert.equal(await page.locator("#suspensions tbody tr").count(), 0);

  // su-bob says a line; su-ann reports it, and the room.
  const ann = await member("su-ann");
  const bob = await member("su-bob");
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
  const again = await member("su-bob");
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
  console.log(`suspensions browser test: ${((Date.now() - started) / 1000).toFixed(1)} s`);
});
