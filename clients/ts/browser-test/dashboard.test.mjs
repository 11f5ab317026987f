// The operator dashboard in a real browser on a two-shard cluster: it shows the nodes and
// the rooms each shard runs with their fences; "Drain" on s1 shows the rebalance and its
// rooms moving to s2; "Weight" brings s1 back; "Move" pins one room to s1; "Close" closes it
// for the platform with a reason its member is told, and "Reopen" lets them back.
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
const ROOMS = 40;

before(async () => {
  cluster = await startCluster({ shards: 2 });
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await cluster?.stop();
});

test("the dashboard shows a drain moving every room of s1 to s2", async () => {
  const started = Date.now();
  // Rooms with a member each on both shards (an empty room is not restarted after a move;
  // one room per user).
  const users = [];
  for (let i = 0; i < ROOMS; i++) {
    const c = new Client({ url: cluster.gateway.url, token: cluster.token(`ops-${i}`), WebSocket });
    users.push(c);
    await c.connect();
    await c.join(`dash-${i}`);
  }
  const lease = await cluster.admin("GET", "/admin/leases");
  const count = (id) => lease.body.shards.find((s) => s.node === id)?.rooms.length ?? 0;
  assert.ok(count("s1") > 0 && count("s2") > 0, JSON.stringify(lease.body));

  const page = await (await browser.newContext({ viewport: { width: 1200, height: 900 } })).newPage();
  page.on("pageerror", (e) => console.error(`dashboard page error: ${e.message}`));
  await page.goto(`http://${cluster.gateway.admin}/dashboard`);
  await page.fill("#token", "wrong-token");
  await page.click("#signin-button");
  await page.locator("#signin-error", { hasText: "refused" }).waitFor({ timeout: T });
  await page.fill("#token", cluster.adminToken);
  await page.click("#signin-button");
  await page.locator('#nodes tr[data-node="s1"] td.live').waitFor({ timeout: T });
  await page.locator('#nodes tr[data-node="s2"] td.live').waitFor({ timeout: T });
  await page.locator('#leases tr[data-shard="s1"]').first().waitFor({ timeout: T });
  await page.locator('#charts .chart[data-series="connections"]').waitFor({ timeout: T });
  // The charts of shard s1, fetched through the gateway's admin port.
  await page.selectOption("#metrics-node", "s1");
  await until(async () => {
    const v = await page.locator('#charts .chart[data-series="rooms running"] .v').textContent().catch(() => "–");
    return v !== "–" && Number(v) > 0;
  }, T, "s1's rooms-running chart");
  await shot(page, "10-dashboard-cluster");

  await page.locator('#nodes tr[data-node="s1"] button[data-action="drain"]').click();
  await page.locator("#result", { hasText: "drain s1: 200" }).waitFor({ timeout: T });
  await shot(page, "11-dashboard-drain-started");
  // Every room leaves s1 and runs on s2, and the rebalance counts its moves.
  await until(async () => (await page.locator('#leases tr[data-shard="s1"]').count()) === 0, T, "s1 empty on the dashboard");
  await until(async () => Number(await page.locator("#rb-done").textContent()) >= count("s1"), T, "moves done");
  await until(async () => (await page.locator('#leases tr[data-shard="s2"]').count()) === ROOMS, T, "every room on s2");
  // The members followed their rooms: each is still in its room on s2.
  for (const c of users) assert.equal([...c.rooms.values()][0]?.state, "joined");
  await page.locator('#nodes tr[data-node="s1"] td:nth-child(3)', { hasText: "0" }).waitFor({ timeout: T });
  await shot(page, "12-dashboard-drained");

  // Weight s1 back to 1, then move one room onto it by hand. The drain's moves are all
  // counted first, so a move back to s1 shows as one more done.
  const rebalance = async () => (await cluster.admin("GET", "/admin/rebalance")).body;
  await until(async () => {
    const r = await rebalance();
    return r?.planned === 0 && r?.in_flight === 0;
  }, T, "the drain's rebalance settled");
  const doneBefore = (await rebalance()).done;
  await page.fill('#nodes tr[data-node="s1"] input[data-weight="s1"]', "1");
  await page.locator('#nodes tr[data-node="s1"] button[data-action="weight"]').click();
  await page.locator("#result", { hasText: "weight s1: 200" }).waitFor({ timeout: T });
  await page.locator('#leases tr[data-shard="s1"]').first().waitFor({ timeout: T });
  // Settled once a move back is done (s2 plans all of its moves at once, so the plan ran)
  // and none is planned or in flight; the three counts are read from one redraw.
  await until(async () => {
    const [planned, inFlight, done] = await page.evaluate(() =>
      ["rb-planned", "rb-inflight", "rb-done"].map((id) => document.getElementById(id).textContent),
    );
    return planned === "0" && inFlight === "0" && Number(done) > doneBefore;
  }, T, "the rebalance back to s1 ran and settled");
  // The table is redrawn every second: the room is found by its id at each step.
  const moved = await page.locator('#leases tr[data-shard="s2"]').first().getAttribute("data-room");
  await page.locator(`#leases tr[data-room="${moved}"] button[data-action="move"]`).click();
  await page.locator("#result", { hasText: `move ${moved}: 200` }).waitFor({ timeout: T });
  await page.locator(`#leases tr[data-room="${moved}"][data-shard="s1"]`).waitFor({ timeout: T });
  await shot(page, "13-dashboard-moved");
  // "Close" asks for the reason and closes the room for the platform: its member is taken out,
  // and cannot join again until "Reopen".
  const closed = users.find((c) => c.rooms.has(moved));
  page.once("dialog", (d) => void d.accept("closed for review"));
  await page.locator(`#leases tr[data-room="${moved}"] button[data-action="close"]`).click();
  await page.locator("#result", { hasText: `close ${moved}: 200` }).waitFor({ timeout: T });
  await until(async () => !closed.rooms.has(moved) || closed.rooms.get(moved).state !== "joined", T, "the member taken out");
  await assert.rejects(closed.join(moved), (e) => e.code === "ROOM_CLOSED" && e.message.includes("closed for review"));
  await page.locator(`#leases tr[data-room="${moved}"] button[data-action="reopen"]`).click();
  await page.locator("#result", { hasText: `reopen ${moved}: 200` }).waitFor({ timeout: T });
  await closed.join(moved);
  for (const c of users) c.close();
  console.log(`dashboard browser test: ${((Date.now() - started) / 1000).toFixed(1)} s`);
});
