// The demo room in a real browser: two users join, take seats, chat (one reports a line of the
// other's, one takes a line back, one answers the other's line mentioning them, the owner's
// "@all" line stands out on the other page and a member's is plain text, the owner pins the
// answer above the chat and takes it down, mutes the chat and sets slow mode),
// like the room (the coalesced like counter), send a gift and get the app backend's notice,
// play a PK (the owner starts and stops it, a gift scores for a team), then a PK against
// another room that the app's backend matches (the panel names that room; the owner's Stop
// ends it in both rooms), then PKs the owner's page arranges by invitation (a Node host
// declines, then accepts; a third page's invitation box is accepted with its button), each
// seeing the other's events; a node restart shows "reconnecting", then both resume. In a room
// switched to apply mode a member asks for a seat and the owner approves it; the owner invites
// the member back to a seat, mutes and unmutes their chat, and kicks them.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import WebSocket from "ws";
import { Client } from "../dist/index.js";
import { startNode } from "../test/node.mjs";
import { launch, shot } from "./browser.mjs";

let node;
let dataDir;
let browser;
const T = 20_000;

before(async () => {
  node = await startNode({ args: ["--demo"] });
  dataDir = node.dataDir;
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await node?.cleanup();
  // The restarted node was given the first one's data dir, which it leaves in place.
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

async function open(user, room) {
  const ctx = await browser.newContext({ viewport: { width: 1100, height: 800 } });
  const page = await ctx.newPage();
  page.on("pageerror", (e) => console.error(`[${user}] page error: ${e.message}`));
  await page.goto(`${node.http}/?user=${user}&room=${room}`);
  await page.locator("#app").waitFor({ state: "visible", timeout: T });
  await page.locator('#conn[data-state="open"]').waitFor({ timeout: T });
  return page;
}

const seat = (page, i) => page.locator(`#seats .seat[data-index="${i}"]`);

test("two browsers: seats, chat, a gift, and a restart that resumes", async () => {
  const started = Date.now();
  const room = "browser-demo";
  const alice = await open("alice", room);
  const bob = await open("bob", room);
  await alice.locator("#members li", { hasText: "bob" }).waitFor({ timeout: T });
  await shot(alice, "01-alice-joined");

  await seat(alice, 0).locator('button[data-action="take"]').click();
  await bob.locator('#seats .seat[data-index="0"][data-user="alice"]').waitFor({ timeout: T });
  await seat(bob, 1).locator('button[data-action="take"]').click();
  await alice.locator('#seats .seat[data-index="1"][data-user="bob"]').waitFor({ timeout: T });
  await shot(bob, "02-bob-sees-seats");

  await alice.fill("#chat-input", "hi bob");
  await alice.click("#chat-send");
  await bob.locator("#chat-log li", { hasText: "alice: hi bob" }).waitFor({ timeout: T });
  await bob.fill("#chat-input", "hey alice");
  await bob.press("#chat-input", "Enter");
  await alice.locator("#chat-log li", { hasText: "bob: hey alice" }).waitFor({ timeout: T });
  // Bob reports alice's line (his own lines have no report button); the button says it went.
  const hi = bob.locator("#chat-log li", { hasText: "alice: hi bob" });
  assert.equal(await bob.locator("#chat-log li", { hasText: "bob: hey alice" }).locator("button.report").count(), 0);
  await hi.locator("button.report").click();
  await hi.locator(".reported", { hasText: "reported" }).waitFor({ timeout: T });
  // Bob takes his line back: both pages show it recalled.
  await bob.fill("#chat-input", "oops, wrong room");
  await bob.press("#chat-input", "Enter");
  await alice.locator("#chat-log li", { hasText: "bob: oops, wrong room" }).waitFor({ timeout: T });
  await bob.locator("#chat-log li", { hasText: "bob: oops, wrong room" }).locator("button.recall").click();
  for (const p of [alice, bob]) await p.locator("#chat-log li.recalled", { hasText: "bob recalled a message" }).waitFor({ timeout: T });
  // Bob answers alice's line with its Reply button and mentions her: both pages quote her line,
  // and only on hers does his line stand out as mentioning her.
  await hi.locator("button.reply").click();
  await bob.locator("#chat-replying", { hasText: "replying to alice: hi bob" }).waitFor({ timeout: T });
  await bob.fill("#chat-input", "@alice yes");
  await bob.press("#chat-input", "Enter");
  await bob.locator("#chat-replying").waitFor({ state: "hidden", timeout: T });
  for (const p of [alice, bob]) {
    const line = p.locator("#chat-log li", { hasText: "bob: @alice yes" });
    await line.locator(".quote", { hasText: /^↪ alice: hi bob$/ }).waitFor({ timeout: T });
  }
  await alice.locator("#chat-log li.mentions-me", { hasText: "bob: @alice yes" }).waitFor({ timeout: T });
  assert.equal(await bob.locator("#chat-log li", { hasText: "bob: @alice yes" }).evaluate((li) => li.classList.contains("mentions-me")), false);
  // The owner's "@all" line mentions everyone: it stands out on bob's page like a mention of
  // him. From bob, a member, "@all" is just text: sent, and not highlighted on alice's page.
  await alice.fill("#chat-input", "@all hello everyone");
  await alice.press("#chat-input", "Enter");
  await bob.locator("#chat-log li.mentions-me", { hasText: "alice: @all hello everyone" }).waitFor({ timeout: T });
  await bob.fill("#chat-input", "@all me too");
  await bob.press("#chat-input", "Enter");
  const plain = alice.locator("#chat-log li", { hasText: "bob: @all me too" });
  await plain.waitFor({ timeout: T });
  assert.equal(await plain.evaluate((li) => li.classList.contains("mentions-me")), false);
  // The owner pins bob's line: both pages show it above the chat; only the staff get Pin
  // buttons and the Unpin button. Unpinned, the bar goes on both pages.
  await alice.locator("#chat-log li", { hasText: "bob: @alice yes" }).locator("button.pin").click();
  for (const p of [alice, bob]) await p.locator("#chat-pinned", { hasText: "📌 bob: @alice yes" }).waitFor({ timeout: T });
  await alice.locator("#chat-unpin").waitFor({ state: "visible", timeout: T });
  assert.equal(await bob.locator("#chat-log button.pin").count(), 0);
  assert.equal(await bob.locator("#chat-unpin").isVisible(), false);
  await shot(bob, "03a-pinned");
  await alice.click("#chat-unpin");
  for (const p of [alice, bob]) await p.locator("#chat-pinned").waitFor({ state: "hidden", timeout: T });
  // The owner mutes the chat for members, then sets slow mode instead: bob's page says so.
  await alice.click("#chat-mute");
  await bob.locator("#chat-rules", { hasText: "the chat is muted for members" }).waitFor({ timeout: T });
  await bob.fill("#chat-input", "muted?");
  await bob.press("#chat-input", "Enter");
  await bob.locator("#chat-error", { hasText: "CHAT_MUTED" }).waitFor({ timeout: T });
  await alice.locator("#chat-mute", { hasText: "Let members chat" }).click();
  await alice.selectOption("#slow-mode", "30");
  await bob.locator("#chat-rules", { hasText: /^slow mode: one line every 30 s$/ }).waitFor({ timeout: T });
  await alice.selectOption("#slow-mode", "0");
  await bob.locator("#chat-rules", { hasText: /^$/ }).waitFor({ state: "attached", timeout: T });
  await shot(alice, "03-chat");
  // Likes: hearts float up on the other page, named after the liker, and both counters follow.
  await alice.click("#like");
  await bob.locator("#gift-fx .fx.heart", { hasText: "alice" }).first().waitFor({ timeout: T });
  await alice.click("#like");
  for (const p of [alice, bob]) await p.locator("#like-count", { hasText: /^2$/ }).waitFor({ timeout: T });
  // The app backend's notice, through the admin API, shown in both chats.
  const notice = await node.admin("POST", `/admin/rooms/${room}/messages`, { type: "notice", data: { text: "Welcome to the party" } });
  if (notice.status !== 200) throw new Error(`admin message: ${notice.status} ${JSON.stringify(notice.body)}`);
  for (const p of [alice, bob]) await p.locator("#chat-log li.sys", { hasText: "📢 Welcome to the party" }).waitFor({ timeout: T });

  await alice.locator("#balance", { hasText: "1000" }).waitFor({ timeout: T }); // the demo coins
  await alice.selectOption("#gift-to", "bob");
  await alice.locator('#gifts button[data-gift="rose"]').click();
  await bob.locator("#chat-log li.gift", { hasText: "alice sent Rose ×1 to bob" }).waitFor({ timeout: T });
  await bob.locator("#gift-fx .fx").first().waitFor({ timeout: T });
  await shot(bob, "04-bob-receives-gift");
  await alice.locator("#balance", { hasText: "990" }).waitFor({ timeout: T });
  await bob.locator("#earnings", { hasText: "5" }).waitFor({ timeout: T });

  // A PK: the owner starts one (the left half of the seats, bob's among them, against the right);
  // a rose to bob scores for red on both pages; the owner stops it and both pages name the winner.
  await alice.locator("#pk-toggle", { hasText: "Start a PK" }).click();
  for (const p of [alice, bob]) await p.locator("#pk-title", { hasText: "PK #1" }).waitFor({ timeout: T });
  await bob.locator('#seats .seat.red[data-index="1"]').waitFor({ timeout: T });
  await bob.locator('#seats .seat.blue[data-index="4"]').waitFor({ timeout: T });
  await alice.locator('#gifts button[data-gift="rose"]').click();
  for (const p of [alice, bob]) await p.locator("#pk-red", { hasText: /^10$/ }).waitFor({ timeout: T });
  await shot(bob, "04b-pk-scores");
  await alice.locator("#pk-toggle", { hasText: "Stop the PK" }).click();
  for (const p of [alice, bob]) {
    await p.locator("#pk-result", { hasText: "PK #1: red wins, 10 to 0 (red's top sender alice)" }).waitFor({ timeout: T });
    await p.locator("#pk").waitFor({ state: "hidden", timeout: T });
  }
  await alice.locator("#balance", { hasText: "980" }).waitFor({ timeout: T });

  // A PK against another room (carl's), matched through the admin API: the panel reads
  // "PK #2 vs <room>", this room against that room's id, and the log says so; a rose in this
  // room scores for it. The owner's Stop ends it in both rooms and the panel hides.
  const other = "browser-demo-vs";
  const carl = new Client({ url: node.url, token: node.token("carl"), WebSocket });
  await carl.connect();
  const carlRoom = await carl.join(other);
  const carlEnd = carlRoom.next("pk.end", undefined, T);
  const matched = await node.admin("POST", "/admin/pk", { rooms: [room, other], seconds: 60, link: "demo-match" });
  assert.equal(matched.status, 200, JSON.stringify(matched.body));
  for (const p of [alice, bob]) {
    await p.locator("#pk-title", { hasText: `PK #2 vs ${other}` }).waitFor({ timeout: T });
    await p.locator("#chat-log li.sys", { hasText: `against ${other}: this room's gifts against theirs` }).waitFor({ timeout: T });
  }
  assert.deepEqual([await bob.locator("#pk-red-name").textContent(), await bob.locator("#pk-blue-name").textContent()], ["This room", other]);
  await alice.locator('#gifts button[data-gift="rose"]').click();
  for (const p of [alice, bob]) await p.locator("#pk-red", { hasText: /^10$/ }).waitFor({ timeout: T });
  await shot(bob, "04c-pk-vs-room");
  await alice.locator("#pk-toggle", { hasText: "Stop the PK" }).click();
  for (const p of [alice, bob]) {
    await p.locator("#pk-result", { hasText: `PK #2: this room won against ${other}, 10 to 0` }).waitFor({ timeout: T });
    await p.locator("#pk").waitFor({ state: "hidden", timeout: T });
  }
  const end = await carlEnd;
  assert.deepEqual([end.red, end.blue, end.winner, end.vs], [0, 10, "blue", { room, link: "demo-match" }]);

  // PKs by invitation, from the owner's page (section 16.6). A room that does not exist is
  // refused with its code; carl (a Node client) declines the first invitation and accepts the
  // second: the panel reads "vs <carl's room>", and the owner's Stop ends it.
  await alice.fill("#pk-invite-room", "browser-demo-nowhere");
  await alice.click("#pk-invite");
  await alice.locator("#chat-log li.sys", { hasText: "could not invite browser-demo-nowhere: ROOM_NOT_FOUND" }).waitFor({ timeout: T });
  let invited = carlRoom.next("pk.invite", (e) => e.from === room, T);
  await alice.fill("#pk-invite-room", other);
  await alice.click("#pk-invite");
  await alice.locator("#chat-log li.sys", { hasText: `invited ${other}…` }).waitFor({ timeout: T });
  let inv = await invited;
  assert.deepEqual([inv.by, inv.seconds], ["alice", 60]);
  await carlRoom.declinePk(inv.link);
  await alice.locator("#chat-log li.sys", { hasText: `${other} declined the PK` }).waitFor({ timeout: T });
  invited = carlRoom.next("pk.invite", (e) => e.from === room, T);
  await alice.fill("#pk-invite-room", other);
  await alice.click("#pk-invite");
  inv = await invited;
  await carlRoom.acceptPk(inv.link);
  for (const p of [alice, bob]) await p.locator("#pk-title", { hasText: `vs ${other}` }).waitFor({ timeout: T });
  await shot(alice, "04d-pk-invited-room");
  await alice.locator("#pk-toggle", { hasText: "Stop the PK" }).click();
  for (const p of [alice, bob]) await p.locator("#pk").waitFor({ state: "hidden", timeout: T });
  carl.close();

  // A third page owns another room: the owner's invitation shows there as a box with its
  // room, inviter and length; its Accept hides the box and starts the PK on both pages.
  const third = "browser-demo-inv";
  const dora = await open("dora", third);
  await alice.locator("#pk-invite:enabled").waitFor({ timeout: T });
  await alice.fill("#pk-invite-room", third);
  await alice.click("#pk-invite");
  const box = dora.locator("#pk-invites .pk-invite", { hasText: `PK invitation from ${room} by alice, 60 s` });
  await box.waitFor({ timeout: T });
  await shot(dora, "04e-pk-invitation");
  await box.locator('button[data-action="accept"]').click();
  await dora.locator("#pk-invites").waitFor({ state: "hidden", timeout: T });
  await dora.locator("#pk-title", { hasText: `vs ${room}` }).waitFor({ timeout: T });
  await alice.locator("#pk-title", { hasText: `vs ${third}` }).waitFor({ timeout: T });
  await dora.locator("#pk-toggle", { hasText: "Stop the PK" }).click();
  for (const p of [alice, dora]) await p.locator("#pk").waitFor({ state: "hidden", timeout: T });
  await dora.context().close();

  // Restart the node: the pages show "reconnecting", then resume in the new process.
  await node.stop("SIGTERM");
  await alice.locator('#conn[data-state="reconnecting"]').waitFor({ timeout: T });
  await bob.locator('#conn[data-state="reconnecting"]').waitFor({ timeout: T });
  await shot(alice, "05-reconnecting");
  node = await startNode({ args: ["--demo"], dataDir: node.dataDir, ws: node.ws, admin: node.adminAddr, secret: node.secret, adminToken: node.adminToken });
  await alice.locator('#conn[data-state="resumed"]').waitFor({ timeout: 30_000 });
  await bob.locator('#conn[data-state="resumed"]').waitFor({ timeout: 30_000 });
  await bob.fill("#chat-input", "still here?");
  await bob.click("#chat-send");
  await alice.locator("#chat-log li", { hasText: "bob: still here?" }).waitFor({ timeout: T });
  await shot(alice, "06-resumed");
  console.log(`demo browser test: ${((Date.now() - started) / 1000).toFixed(1)} s`);
});

test("two browsers: apply mode, an invitation, a chat mute and a kick from the owner's page", async () => {
  const room = "browser-apply";
  // The first to join a missing room creates it and owns it.
  const olga = await open("olga", room);
  const max = await open("max", room);
  await olga.locator("#members li", { hasText: "max" }).waitFor({ timeout: T });
  await olga.locator("#staff").waitFor({ state: "visible", timeout: T });
  await olga.locator("#seat-mode").click();
  await olga.locator('#seat-mode[data-mode="apply"]').waitFor({ timeout: T });
  // The member sees "Ask" where a free seat said "Take", and asks for seat 2.
  await seat(max, 2).locator('button[data-action="ask"]').click();
  await max.locator("#chat-log li", { hasText: "you asked for seat #2" }).waitFor({ timeout: T });
  await olga.locator('#requests li[data-user="max"]').waitFor({ timeout: T });
  await shot(olga, "07-owner-sees-request");
  await olga.locator('#requests li[data-user="max"] button[data-action="approve"]').click();
  await max.locator('#seats .seat[data-index="2"][data-user="max"]').waitFor({ timeout: T });
  await olga.locator('#seats .seat[data-index="2"][data-user="max"]').waitFor({ timeout: T });
  await max.locator("#chat-log li", { hasText: "your seat request was approved" }).waitFor({ timeout: T });
  await olga.locator('#requests li[data-user="max"]').waitFor({ state: "detached", timeout: T });
  await shot(max, "08-member-seated");

  // Off the seat, then invited back by the owner from the member list.
  await seat(max, 2).locator('button[data-action="leave"]').click();
  await olga.locator('#seats .seat[data-index="2"][data-user=""]').waitFor({ timeout: T });
  await olga.locator('#members li[data-user="max"] button[data-action="invite"]').click();
  await max.locator("#invite", { hasText: "olga invites you" }).waitFor({ timeout: T });
  await shot(max, "09-invited");
  await max.locator('#invite button[data-action="accept"]').click();
  await olga.locator('#seats .seat[data-user="max"]').waitFor({ timeout: T });
  await olga.locator("#chat-log li", { hasText: "max accepted the invitation" }).waitFor({ timeout: T });

  // Chat muted: max's line is refused; unmuted: it goes through.
  await olga.locator('#members li[data-user="max"] button[data-action="mute-chat"]').click();
  await max.locator("#chat-log li", { hasText: "the staff muted your chat" }).waitFor({ timeout: T });
  await olga.locator('#members li[data-user="max"]', { hasText: "(chat muted)" }).waitFor({ timeout: T });
  await max.fill("#chat-input", "can I talk?");
  await max.click("#chat-send");
  await max.locator("#chat-error", { hasText: "CHAT_MUTED" }).waitFor({ timeout: T });
  await olga.locator('#members li[data-user="max"] button[data-action="unmute-chat"]').click();
  await max.locator("#chat-log li", { hasText: "you may chat again" }).waitFor({ timeout: T });
  await max.fill("#chat-input", "thanks");
  await max.click("#chat-send");
  await olga.locator("#chat-log li", { hasText: "max: thanks" }).waitFor({ timeout: T });

  // Kicked: max's page says so and the member list drops him.
  await olga.locator('#members li[data-user="max"] button[data-action="kick"]').click();
  await max.locator('#conn[data-state="closed"]', { hasText: "kicked" }).waitFor({ timeout: T });
  await olga.locator('#members li[data-user="max"]').waitFor({ state: "detached", timeout: T });
  await shot(olga, "10-member-kicked");
});
