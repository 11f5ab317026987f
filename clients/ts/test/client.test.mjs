// The client against a real standalone node: requests, typed events, errors, gifts through
// the ledger, token refresh, resume with `since` after a dropped socket, reconnect after a
// node restart (1001), and 503 Retry-After at connect.
import { test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import WebSocket from "ws";
import { Client, ChorusError, backoff, uuidv7 } from "../dist/index.js";
import { mint, startNode, until, useNode } from "./node.mjs";

const fx = useNode({ initialMs: 100, maxMs: 1000 });
const { client, clients } = fx;

/** A socket as a browser's (and Node's global one): no `on` to read a refused upgrade's status with. */
class BrowserLike {
  constructor(url) {
    this.ws = new WebSocket(url);
  }
  get readyState() { return this.ws.readyState; }
  send(d) { this.ws.send(d); }
  close(code, reason) { this.ws.close(code, reason); }
  set onopen(f) { this.ws.onopen = f; }
  set onmessage(f) { this.ws.onmessage = f; }
  set onclose(f) { this.ws.onclose = f; }
  set onerror(f) { this.ws.onerror = f; }
}

test("backoff grows, is capped and jittered; uuidv7 is a v7 UUID", () => {
  assert.equal(backoff(0, 100, 1000, () => 0), 50);
  assert.equal(backoff(0, 100, 1000, () => 1), 100);
  assert.equal(backoff(3, 100, 1000, () => 1), 800);
  assert.equal(backoff(30, 100, 1000, () => 1), 1000);
  const id = uuidv7();
  assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
});

test("two clients join, chat, take seats and see each other's typed events", async () => {
  const a = client("alice");
  const b = client("bob");
  await Promise.all([a.connect(), b.connect()]);
  assert.equal(a.state, "open");
  assert.match(a.session.server, /^chorus\//);
  const ra = await a.join("t-chat");
  const rb = await b.join("t-chat");
  assert.equal(rb.snapshot.members, 2);
  const joined = await until(() => ra.snapshot.members === 2, 5000, "alice sees bob join");
  assert.ok(joined);

  const heard = rb.next("chat", (e) => e.text === "hello bob");
  const ok = await ra.chat("hello bob");
  const ev = await heard;
  assert.equal(ev.from, "alice");
  assert.equal(ev.room, "t-chat");
  assert.equal(ev.seq, ok.seq);
  assert.deepEqual(rb.position, { epoch: ev.epoch, seq: ev.seq });
  // Bob answers alice's line and mentions her; a plain line carries neither field.
  assert.equal(ev.mentions, undefined);
  const answer = ra.next("chat", (e) => e.text === "hi alice");
  const sent = await rb.chat("hi alice", { mentions: ["alice"], replyTo: ok.seq });
  const got = await answer;
  assert.equal(got.seq, sent.seq);
  assert.deepEqual(got.mentions, ["alice"]);
  assert.deepEqual(got.reply, { seq: ok.seq, from: "alice" });
  await assert.rejects(rb.chat("hey", { mentions: ["nobody"] }), (e) => e.code === "BAD_REQUEST");
  await assert.rejects(rb.chat("re", { replyTo: 99999 }), (e) => e.code === "NO_SUCH_MESSAGE");
  // "@all": a member may not mention everyone; the owner (alice) may, and bob sees `mention_all`.
  assert.equal(ev.mention_all, undefined, "a plain line has no mention_all");
  await assert.rejects(rb.chat("@all hi", { mentionAll: true }), (e) => e instanceof ChorusError && e.code === "FORBIDDEN");
  const toAll = rb.next("chat", (e) => e.text === "@all listen");
  const sentAll = await ra.chat("@all listen", { mentionAll: true });
  const all = await toAll;
  assert.deepEqual([all.seq, all.from, all.mention_all, all.mentions], [sentAll.seq, "alice", true, undefined]);
  // The owner pins her line: bob's snapshot follows the event, and so does its removal.
  const pinned = rb.next("chat.pin", (e) => e.line !== null);
  await ra.pinChat(ok.seq);
  assert.deepEqual([(await pinned).line.text, rb.snapshot.pinned?.text, rb.snapshot.pinned?.by], ["hello bob", "hello bob", "alice"]);
  await assert.rejects(rb.pinChat(ok.seq), (e) => e.code === "FORBIDDEN");
  const unpinned = rb.next("chat.pin", (e) => e.line === null);
  await ra.pinChat(null);
  await unpinned;
  assert.equal(rb.snapshot.pinned, undefined);

  const seated = ra.next("seat.update", (e) => e.user === "bob");
  const { seat } = await rb.takeSeat(2);
  assert.equal(seat, 2);
  const su = await seated;
  assert.equal(su.index, 2);
  assert.equal(ra.snapshot.seats[2].user, "bob", "the snapshot follows the events");

  await assert.rejects(ra.takeSeat(2), (e) => e instanceof ChorusError && e.code === "SEAT_TAKEN" && !e.retryable);
  await assert.rejects(ra.takeSeat(99), (e) => e instanceof ChorusError && e.code === "NO_SUCH_SEAT");
  // The owner swaps seats with bob in one step, and back: both seats change for both of them.
  await ra.takeSeat(1);
  await assert.rejects(ra.moveSeat(1, "bob"), (e) => e.code === "SEAT_TAKEN");
  assert.deepEqual(await ra.moveSeat(1, "bob", { swap: true }), { seat: 1 });
  const swapped = (r) => r.snapshot.seats[1].user === "bob" && r.snapshot.seats[2].user === "alice";
  await until(() => swapped(ra) && swapped(rb), 5000, "both see the swap");
  await ra.moveSeat(2, "bob", { swap: true });
  await until(() => rb.snapshot.seats[2].user === "bob" && rb.snapshot.seats[1].user === "alice", 5000, "swapped back");
  await rb.leaveSeat();
  await until(() => ra.snapshot.seats[2].user === null, 5000, "the seat freed");
  const { members, count } = await ra.members();
  assert.equal(count, 2);
  assert.deepEqual(members.map((m) => m.user).sort(), ["alice", "bob"]);
});

test("app-defined messages: a sequenced one moves the position, a volatile one does not; a room-wide chat mute; slow mode; a chat line recalled; room attributes", async () => {
  const a = client("cu-alice");
  const b = client("cu-bob");
  await Promise.all([a.connect(), b.connect()]);
  const ra = await a.join("t-custom");
  const rb = await b.join("t-custom");
  const moved = rb.next("custom", (e) => e.type === "game.move");
  const ok = await ra.sendCustom("game.move", { x: 3, y: [1, 2] });
  const ev = await moved;
  assert.deepEqual([ev.from, ev.data, ev.seq], ["cu-alice", { x: 3, y: [1, 2] }, ok.seq]);
  assert.deepEqual(rb.position, { epoch: ev.epoch, seq: ok.seq });
  const liked = rb.next("custom", (e) => e.type === "like");
  assert.deepEqual(await ra.sendCustom("like", undefined, { volatile: true }), {});
  const like = await liked;
  assert.deepEqual([like.from, like.seq, like.epoch, like.data], ["cu-alice", undefined, undefined, undefined]);
  assert.deepEqual(rb.position, { epoch: ev.epoch, seq: ok.seq }, "a volatile message takes no seq");
  await assert.rejects(ra.sendCustom("no spaces allowed"), (e) => e instanceof ChorusError && e.code === "BAD_REQUEST");
  // The owner mutes the room's chat: the snapshots follow, a member is refused, the owner is not.
  await ra.update({ chat_muted: true });
  await until(() => rb.snapshot.chat_muted === true, 5000, "bob sees the room muted");
  await assert.rejects(rb.chat("hello?"), (e) => e.code === "CHAT_MUTED");
  await assert.rejects(rb.sendCustom("like", undefined, { volatile: true }), (e) => e.code === "CHAT_MUTED");
  await ra.chat("the owner still speaks");
  await ra.update({ chat_muted: false });
  await until(() => rb.snapshot.chat_muted === false, 5000, "bob sees it lifted");
  await rb.chat("back");
  // Slow mode: one line a minute for members; the snapshots follow, the owner is not held back.
  await ra.update({ slow_mode: 60 });
  await until(() => rb.snapshot.slow_mode === 60, 5000, "bob sees slow mode");
  await rb.chat("one line");
  await assert.rejects(rb.chat("and another"), (e) => e instanceof ChorusError && e.code === "SLOW_MODE" && !e.retryable);
  await ra.chat("the owner");
  await ra.chat("speaks freely");
  await ra.update({ slow_mode: 0 });
  await until(() => rb.snapshot.slow_mode === 0, 5000, "bob sees it off");
  await rb.chat("free again");
  // A line taken back: everyone hears which; someone else's is refused, a missing one too.
  const oops = await rb.chat("oops");
  const recalled = ra.next("chat.recall", (e) => e.line === oops.seq);
  await assert.rejects(ra.recallChat(oops.seq + 1000), (e) => e.code === "NO_SUCH_MESSAGE");
  await rb.recallChat(oops.seq);
  const r = await recalled;
  assert.deepEqual([r.from, r.by, r.epoch], ["cu-bob", "cu-bob", ev.epoch]);
  assert.ok(r.seq > oops.seq, "the recall is sequenced after the line");
  // Reports: a line (its sender is the user reported), the same again a duplicate, oneself refused.
  const rude = await rb.chat("rude words");
  const filed = await ra.report("abuse", { seq: rude.seq, text: "in the chat" });
  assert.ok(Number.isInteger(filed.id) && filed.id > 0, JSON.stringify(filed));
  assert.deepEqual(filed, { id: filed.id }, "the moderation queue's id");
  assert.deepEqual(await ra.report("abuse", { seq: rude.seq, text: "again" }), { duplicate: true });
  await assert.rejects(rb.report("spam", { user: "cu-bob" }), (e) => e.code === "BAD_REQUEST");
  await assert.rejects(ra.report("not a code"), (e) => e.code === "BAD_REQUEST");
  // Room attributes: the owner sets two and removes one; every snapshot follows, a joiner's too.
  await ra.setAttrs({ theme: "night", pk: [3, 1] });
  await until(() => rb.snapshot.attrs?.theme === "night", 5000, "bob sees the attributes");
  await ra.setAttrs({ pk: [4, 1] }, ["theme"]);
  await until(() => rb.snapshot.attrs?.theme === undefined && rb.snapshot.attrs?.pk?.[0] === 4, 5000, "bob sees the change");
  await assert.rejects(rb.setAttrs({ theme: "day" }), (e) => e.code === "FORBIDDEN");
  const c = client("cu-carol");
  await c.connect();
  const rc = await c.join("t-custom");
  assert.deepEqual(rc.snapshot.attrs, { pk: [4, 1] });
});

test("likes: each reply counts its own, everyone gets the added likes coalesced, and the snapshots follow", async () => {
  const a = client("lk-alice");
  const b = client("lk-bob");
  await Promise.all([a.connect(), b.connect()]);
  const ra = await a.join("t-likes");
  const rb = await b.join("t-likes");
  assert.equal(ra.snapshot.likes, undefined, "no likes yet");
  const seen = [];
  rb.on("room.likes", (e) => seen.push(e));
  assert.deepEqual(await ra.like(), { total: 1 });
  assert.deepEqual(await rb.like(5), { total: 6 });
  assert.deepEqual(await ra.like(4), { total: 10 });
  await until(() => rb.snapshot.likes === 10 && ra.snapshot.likes === 10, 5000, "both snapshots reach the total");
  assert.ok(seen.length >= 1 && seen.length <= 3, `coalesced: ${seen.length} events for 3 calls`);
  assert.equal(seen.reduce((n, e) => n + e.added, 0), 10, "every like in exactly one event");
  const last = seen[seen.length - 1];
  assert.deepEqual([last.total, last.seq, last.epoch], [10, undefined, undefined]);
  assert.ok(last.recent.length >= 1 && last.recent.every((u) => u === "lk-alice" || u === "lk-bob"));
  await assert.rejects(ra.like(0), (e) => e instanceof ChorusError && e.code === "BAD_REQUEST");
  const c = client("lk-carol");
  await c.connect();
  const rc = await c.join("t-likes");
  assert.equal(rc.snapshot.likes, 10);
});

test("a connection is in one room: joining another ends the first (switched), and joining it again really joins", async () => {
  const a = client("sw-alice");
  await a.connect();
  const [r1, again] = await Promise.all([a.join("t-sw-1"), a.join("t-sw-1")]);
  assert.equal(again, r1, "a join of a room being joined waits for that join");
  assert.ok(r1.snapshot, "and the room it returns is joined");
  const left = r1.next("left");
  const r2 = await a.join("t-sw-2");
  assert.equal((await left).reason, "switched");
  assert.equal(r1.state, "left");
  // Back to the first room: a new join, and the second room ends in turn.
  const left2 = r2.next("left");
  const back = await a.join("t-sw-1");
  assert.notEqual(back, r1);
  assert.equal((await left2).reason, "switched");
  const heard = back.next("chat", (e) => e.text === "here");
  await back.chat("here");
  assert.equal((await heard).from, "sw-alice");
});

test("joins made without waiting end in the room of the last one: A → B → A, from no room and from A", async () => {
  const a = client("hop-ann");
  await a.connect();
  const notInB = (e) => e instanceof ChorusError && e.code === "NOT_IN_ROOM";
  // From no room: A, B and A again, none waiting for the others.
  const [r1, rb, r1again] = await Promise.all([a.join("t-hop-a"), a.join("t-hop-b"), a.join("t-hop-a")]);
  assert.equal(r1again, r1);
  assert.deepEqual([r1.state, rb.state], ["joined", "left"]);
  assert.deepEqual([...a.rooms.keys()], ["t-hop-a"]);
  await r1.chat("in a"); // the server agrees: the connection is in A, not in B
  await assert.rejects(a.request("chat.send", { room: "t-hop-b", text: "in b?" }), notInB);
  // From A, joined: B, then A again before B's reply.
  const [rb2, r1back] = await Promise.all([a.join("t-hop-b"), a.join("t-hop-a")]);
  assert.equal(r1back, r1);
  assert.deepEqual([r1.state, rb2.state], ["joined", "left"]);
  assert.deepEqual([...a.rooms.keys()], ["t-hop-a"]);
  await r1.chat("still in a");
  await assert.rejects(a.request("chat.send", { room: "t-hop-b", text: "in b?" }), notInB);
});

test("close() ends the rooms (client_closed): after connect() a join of the same room joins again", async () => {
  const a = client("cls-ann");
  await a.connect();
  const r = await a.join("t-close");
  const left = r.next("left");
  a.close();
  assert.equal((await left).reason, "client_closed");
  assert.equal(r.state, "left");
  assert.equal(a.rooms.size, 0);
  await a.connect();
  const again = await a.join("t-close");
  assert.notEqual(again, r, "a new join, not the room of the closed connection");
  assert.equal(again.state, "joined");
  const heard = again.next("chat", (e) => e.text === "back");
  await again.chat("back");
  await heard;
});

test("a gift goes through the ledger once and both sides see it", async () => {
  const granted = await fx.node.admin("POST", "/admin/wallets/gina/grant", { amount: 100, key: "ts-gina-1" });
  assert.equal(granted.status, 200, JSON.stringify(granted.body));
  const g = client("gina");
  const h = client("hal");
  await Promise.all([g.connect(), h.connect()]);
  const { gifts } = await g.gifts();
  const rose = gifts.find((x) => x.id === "rose");
  assert.ok(rose, "the default catalog has a rose");
  const rg = await g.join("t-gift");
  const rh = await h.join("t-gift");
  await until(() => rg.snapshot.members === 2, 5000, "both in");
  const seen = rh.next("gift");
  const reqId = uuidv7();
  const ok = await rg.sendGift("rose", ["hal"], { reqId });
  assert.equal(ok.balance, 100 - rose.price);
  const ev = await seen;
  assert.deepEqual([ev.from, ev.to, ev.gift, ev.coins], ["gina", ["hal"], "rose", rose.price]);
  const again = await rg.sendGift("rose", ["hal"], { reqId });
  assert.equal(again.order, ok.order, "the same req_id is the same order");
  assert.deepEqual(await g.balance(), { balance: 100 - rose.price, earnings: 0 });
  assert.equal((await h.balance()).earnings, Math.floor(rose.price / 2));
  // A gift whose socket drops under it is retried with its req_id after the rejoin: paid once.
  const second = rg.sendGift("rose", ["hal"]);
  g.dropConnection();
  const ok2 = await second;
  assert.equal(ok2.balance, 100 - 2 * rose.price);
  assert.deepEqual(await g.balance(), { balance: 100 - 2 * rose.price, earnings: 0 });
  // The app-wide boards count both orders, asked by a client in no room.
  const e = client("eli");
  await e.connect();
  const senders = await e.appRanks("senders", "day", 100);
  assert.equal(senders.scope, "app");
  assert.deepEqual(senders.entries.find((x) => x.user === "gina"), { user: "gina", score: 2 * rose.price });
  const receivers = await e.appRanks("receivers");
  assert.deepEqual(receivers.entries.find((x) => x.user === "hal"), { user: "hal", score: 2 * rose.price });
});

test("a gift whose reply is lost rejects with its reqId: sent again with it, it is paid once", async () => {
  const granted = await fx.node.admin("POST", "/admin/wallets/kim/grant", { amount: 100, key: "ts-kim-1" });
  assert.equal(granted.status, 200, JSON.stringify(granted.body));
  const sent = [];
  class Spy extends WebSocket {
    send(text) {
      const f = JSON.parse(text);
      if (f.op === "gift.send") sent.push(f.d.req_id);
      super.send(text);
    }
  }
  const k = client("kim", { WebSocket: Spy });
  const l = client("lee");
  await Promise.all([k.connect(), l.connect()]);
  const rose = (await k.gifts()).gifts.find((x) => x.id === "rose");
  const rk = await k.join("t-gift-lost");
  await l.join("t-gift-lost");
  await until(() => rk.snapshot.members === 2, 5000, "lee in");
  // The order goes out, and the client is closed before its reply: it may have been debited.
  const gift = rk.sendGift("rose", ["lee"]);
  assert.equal(sent.length, 1);
  k.close();
  const e = await gift.catch((x) => x);
  assert.ok(e instanceof ChorusError, String(e));
  assert.equal(e.code, "CLOSED");
  assert.equal(e.reqId, sent[0], "the rejection names the key that went out");
  // Sent again with that key on a new connection: one order, one debit.
  await k.connect();
  const again = await k.join("t-gift-lost");
  const ok = await again.sendGift("rose", ["lee"], { reqId: e.reqId });
  assert.deepEqual(sent, [e.reqId, e.reqId]);
  assert.equal(ok.balance, 100 - rose.price);
  assert.deepEqual(await k.balance(), { balance: 100 - rose.price, earnings: 0 });
});

test("a PK: the owner starts it, gifts to a team's seat score, the snapshot shows it, the stop names the winner", async () => {
  const granted = await fx.node.admin("POST", "/admin/wallets/pk-fan/grant", { amount: 100, key: "ts-pk-fan-1" });
  assert.equal(granted.status, 200, JSON.stringify(granted.body));
  const [h, r, f] = [client("pk-host"), client("pk-red"), client("pk-fan")];
  await Promise.all([h.connect(), r.connect(), f.connect()]);
  const rh = await h.join("t-pk");
  const rr = await r.join("t-pk");
  const rf = await f.join("t-pk");
  await rr.takeSeat(2);
  await assert.rejects(rf.startPk(), (e) => e.code === "FORBIDDEN");
  const started = rf.next("pk.start");
  const ok = await rh.startPk({ seconds: 60, red: [2], blue: [3] });
  const ev = await started;
  assert.deepEqual([ev.pk, ev.red_seats, ev.blue_seats, ev.ends_at, ev.by], [ok.pk, [2], [3], ok.ends_at, "pk-host"]);
  assert.ok(typeof ev.seq === "number", "pk.start is sequenced");
  await assert.rejects(rh.startPk(), (e) => e.code === "PK_ON");
  const scored = rh.next("pk.score", (e) => e.red > 0);
  const gift = await rf.sendGift("rose", ["pk-red"]);
  const score = await scored;
  assert.deepEqual([score.red, score.blue, score.seq], [100 - gift.balance, 0, undefined]);
  await until(() => rf.snapshot.pk?.red === 100 - gift.balance, 5000, "the snapshot follows the score");
  assert.deepEqual(rf.snapshot.pk.red_seats, [2]);
  const ended = rf.next("pk.end");
  assert.deepEqual(await rh.stopPk(), {});
  const end = await ended;
  assert.deepEqual([end.winner, end.red_top, end.reason, end.by], ["red", "pk-fan", "stopped", "pk-host"]);
  assert.equal(rf.snapshot.pk, undefined, "no PK on in the snapshot");
  await assert.rejects(rh.stopPk(), (e) => e.code === "NO_PK");
});

test("a PK between two rooms: the backend matches them, each room is red against the other, a stop in one ends both", async () => {
  const [A, B] = ["t-pkvs-a", "t-pkvs-b"];
  for (const fan of ["pkvs-fan-a", "pkvs-fan-b"]) {
    const granted = await fx.node.admin("POST", `/admin/wallets/${fan}/grant`, { amount: 100, key: `ts-${fan}-1` });
    assert.equal(granted.status, 200, JSON.stringify(granted.body));
  }
  const [ha, hb, wa, wb, fa, fb] = ["pkvs-host-a", "pkvs-host-b", "pkvs-watch-a", "pkvs-watch-b", "pkvs-fan-a", "pkvs-fan-b"].map((u) => client(u));
  await Promise.all([ha, hb, wa, wb, fa, fb].map((c) => c.connect()));
  // Each host makes a room (and owns it); a watcher and a fan join each.
  const rha = await ha.join(A);
  await hb.join(B);
  const [rwa, rwb, rfa, rfb] = await Promise.all([wa.join(A), wb.join(B), fa.join(A), fb.join(B)]);
  const startedA = rwa.next("pk.start");
  const startedB = rwb.next("pk.start");
  const matched = await fx.node.admin("POST", "/admin/pk", { rooms: [A, B], seconds: 60, link: "ts-match" });
  assert.equal(matched.status, 200, JSON.stringify(matched.body));
  assert.equal(matched.body.link, "ts-match");
  assert.deepEqual(matched.body.rooms.map((r) => r.room), [A, B]);
  const [sa, sb] = [await startedA, await startedB];
  for (const [ev, other] of [[sa, B], [sb, A]]) {
    assert.deepEqual([ev.red_seats, ev.blue_seats, ev.by, ev.vs], [[], [], null, { room: other, link: "ts-match" }]);
    assert.equal(ev.ends_at, matched.body.ends_at);
  }
  assert.deepEqual([sa.pk, sa.seq, sb.pk, sb.seq], [matched.body.rooms[0].pk, matched.body.rooms[0].seq, matched.body.rooms[1].pk, matched.body.rooms[1].seq]);
  assert.equal(rwa.snapshot.pk.vs.room, B);
  assert.equal(rwb.snapshot.pk.vs.room, A);
  assert.deepEqual([rwa.snapshot.pk.red_seats, rwa.snapshot.pk.blue_seats], [[], []]);
  // Another PK in a room already matched is refused with the room named.
  const again = await fx.node.admin("POST", "/admin/pk", { rooms: [A, "t-pkvs-c"] });
  assert.deepEqual([again.status, again.body.code, again.body.room], [409, "PK_ON", A], JSON.stringify(again.body));
  await assert.rejects(rha.startPk(), (e) => e.code === "PK_ON");
  // Gifts in each room (to its host): one rose in A, two in B. Each room's score is red in its
  // own snapshot and blue in the other's.
  const ga = await rfa.sendGift("rose", ["pkvs-host-a"]);
  await rfb.sendGift("rose", ["pkvs-host-b"]);
  const gb = await rfb.sendGift("rose", ["pkvs-host-b"]);
  const [coinsA, coinsB] = [100 - ga.balance, 100 - gb.balance];
  assert.ok(coinsA > 0 && coinsB > coinsA, `${coinsA} < ${coinsB}`);
  await until(() => rwa.snapshot.pk?.red === coinsA && rwa.snapshot.pk?.blue === coinsB, 10_000, "A's snapshot: red A's coins, blue B's");
  await until(() => rwb.snapshot.pk?.red === coinsB && rwb.snapshot.pk?.blue === coinsA, 10_000, "B's snapshot: red B's coins, blue A's");
  // A's host stops it: ok at once, and both rooms end it with the same scores, mirrored.
  const endedA = rwa.next("pk.end");
  const endedB = rwb.next("pk.end");
  assert.deepEqual(await rha.stopPk(), {});
  await assert.rejects(rha.stopPk(), (e) => e.code === "NO_PK", "a second stop while it ends");
  const [ea, eb] = [await endedA, await endedB];
  assert.deepEqual([ea.red, ea.blue, ea.winner, ea.reason, ea.vs], [coinsA, coinsB, "blue", "stopped", { room: B, link: "ts-match" }]);
  assert.deepEqual([eb.red, eb.blue, eb.winner, eb.reason, eb.vs], [coinsB, coinsA, "red", "stopped", { room: A, link: "ts-match" }]);
  assert.deepEqual([ea.red_top, eb.red_top, ea.blue_top, eb.blue_top], ["pkvs-fan-a", "pkvs-fan-b", undefined, undefined]);
  assert.equal(ea.by, "pkvs-host-a");
  assert.equal(rwa.snapshot.pk, undefined, "no PK on in A's snapshot");
  assert.equal(rwb.snapshot.pk, undefined, "no PK on in B's snapshot");
});

test("a PK between two rooms by invitation: a host invites, the other room's host declines, then accepts; both rooms start it", async () => {
  const [A, B] = ["t-pkinv-a", "t-pkinv-b"];
  const [ha, hb, mb, wa, wb] = ["pkinv-host-a", "pkinv-host-b", "pkinv-member-b", "pkinv-watch-a", "pkinv-watch-b"].map((u) => client(u));
  await Promise.all([ha, hb, mb, wa, wb].map((c) => c.connect()));
  // Each host makes a room (and owns it); a watcher joins each, and a plain member joins B.
  const rha = await ha.join(A);
  const rhb = await hb.join(B);
  const [rmb, rwa, rwb] = await Promise.all([mb.join(B), wa.join(A), wb.join(B)]);
  // Invitations reach only the staff: B's watcher and member must get none.
  const notStaff = [];
  for (const r of [rmb, rwb]) r.on("pk.invite", (e) => notStaff.push(e));
  // Refused invitations: not staff, the room itself, a room that does not exist.
  await assert.rejects(rwa.invitePk(B), (e) => e.code === "FORBIDDEN");
  await assert.rejects(rha.invitePk(A), (e) => e.code === "BAD_REQUEST");
  await assert.rejects(rha.invitePk("t-pkinv-nowhere"), (e) => e.code === "ROOM_NOT_FOUND");

  // A invites B: B's host gets the invitation, with the answer's link and expiry.
  let invited = rhb.next("pk.invite", (e) => e.from === A, 10_000);
  const inv = await rha.invitePk(B, { seconds: 60 });
  assert.equal(typeof inv.link, "string");
  assert.ok(inv.expires_at > Date.now(), `expires_at ${inv.expires_at} is in the future`);
  let ev = await invited;
  assert.deepEqual([ev.link, ev.from, ev.by, ev.seconds, ev.expires_at, ev.room], [inv.link, A, "pkinv-host-a", 60, inv.expires_at, B]);
  // A plain member of B may not answer it; B's host declines and A's host hears of it.
  await assert.rejects(rmb.acceptPk(inv.link), (e) => e.code === "FORBIDDEN");
  const declined = rha.next("pk.declined", (e) => e.link === inv.link, 10_000);
  assert.deepEqual(await rhb.declinePk(inv.link), {});
  // The invited room (the wire's d.room) comes as `vs`: the event's `room` is A, where it came.
  const dec = await declined;
  assert.deepEqual([dec.link, dec.vs, dec.by, dec.room], [inv.link, B, "pkinv-host-b", A]);
  // An invitation is answered once.
  await assert.rejects(rhb.acceptPk(inv.link), (e) => e.code === "NO_SUCH_REQUEST");

  // A invites again; B's host accepts: the PK starts in both rooms with the invitation's link.
  invited = rhb.next("pk.invite", (e) => e.from === A, 10_000);
  const inv2 = await rha.invitePk(B, { seconds: 60 });
  ev = await invited;
  assert.equal(ev.link, inv2.link);
  const startedA = rwa.next("pk.start", undefined, 10_000);
  const startedB = rwb.next("pk.start", undefined, 10_000);
  const ok = await rhb.acceptPk(inv2.link);
  assert.equal(typeof ok.pk, "number");
  const [sa, sb] = [await startedA, await startedB];
  for (const [s, other] of [[sa, B], [sb, A]]) {
    assert.deepEqual([s.red_seats, s.blue_seats, s.by, s.vs], [[], [], null, { room: other, link: inv2.link }]);
    assert.equal(s.ends_at, ok.ends_at);
    assert.ok(typeof s.seq === "number", "pk.start is sequenced");
  }
  assert.equal(sb.pk, ok.pk, "the accept answers B's PK");
  assert.deepEqual(rwa.snapshot.pk.vs, { room: B, link: inv2.link });
  assert.deepEqual(rwb.snapshot.pk.vs, { room: A, link: inv2.link });
  // With the PK on, another invitation is refused.
  await assert.rejects(rha.invitePk(B), (e) => e.code === "PK_ON");

  // A's host stops it: both rooms end it.
  const endedA = rwa.next("pk.end", undefined, 15_000);
  const endedB = rwb.next("pk.end", undefined, 15_000);
  assert.deepEqual(await rha.stopPk(), {});
  const [ea, eb] = [await endedA, await endedB];
  assert.deepEqual([ea.reason, ea.vs, eb.reason, eb.vs], ["stopped", { room: B, link: inv2.link }, "stopped", { room: A, link: inv2.link }]);
  assert.equal(rwa.snapshot.pk, undefined, "no PK on in A's snapshot");
  assert.equal(rwb.snapshot.pk, undefined, "no PK on in B's snapshot");
  assert.deepEqual(notStaff, [], "no invitation reached B's members who are not staff");
});

test("joined() that waits longer than its time-out rejects with a ChorusError TIMEOUT", async () => {
  // The reconnect waits a minute: the room stays rejoining.
  const a = client("jt-ann", { reconnect: { initialMs: 60_000, maxMs: 60_000 } });
  await a.connect();
  const r = await a.join("t-joined-timeout");
  await r.joined();
  a.dropConnection();
  await until(() => r.state === "rejoining", 5000, "the room rejoining");
  await assert.rejects(r.joined(100), (e) => e instanceof ChorusError && e.code === "TIMEOUT" && e.retryable);
  a.close();
  await assert.rejects(r.joined(100), (e) => e instanceof ChorusError && e.code === "NOT_IN_ROOM");
});

test("transfers and direct messages reject with the key they went with", async () => {
  const a = client("key-ann");
  const b = client("key-bob");
  await Promise.all([a.connect(), b.connect()]);
  // Not a seller: refused; the key is the one made for the request, or the caller's.
  const t = await a.transferCoins("key-bob", 5).catch((x) => x);
  assert.ok(t instanceof ChorusError && t.code === "NOT_A_SELLER", String(t));
  assert.match(t.reqId, /^[0-9a-f]{8}-[0-9a-f]{4}-7/);
  const mine = uuidv7();
  await assert.rejects(a.transferCoins("key-bob", 5, mine), (x) => x.code === "NOT_A_SELLER" && x.reqId === mine);
  await b.blockIm("key-ann");
  const m = await a.sendIm("key-bob", "hi").catch((x) => x);
  assert.ok(m instanceof ChorusError && m.code === "BLOCKED", String(m));
  assert.match(m.reqId, /^[0-9a-f]{8}-[0-9a-f]{4}-7/);
});

test("a guard bought shows its badge in the host's room and is listed", async () => {
  const granted = await fx.node.admin("POST", "/admin/wallets/gus/grant", { amount: 5000, key: "ts-gus-1" });
  assert.equal(granted.status, 200, JSON.stringify(granted.body));
  const host = client("hera");
  const fan = client("gus");
  const watcher = client("wes");
  await Promise.all([host.connect(), fan.connect(), watcher.connect()]);
  await host.createRoom({ room: "t-guard" });
  const rw = await watcher.join("t-guard");
  const { plans } = await fan.guardPlans();
  const week = plans.find((p) => p.id === "week");
  assert.ok(week, "the default plans have a week");
  const reqId = uuidv7();
  const ok = await fan.buyGuard("hera", "week", reqId);
  assert.equal(ok.applied, true);
  assert.equal(ok.balance, 5000 - week.price);
  const again = await fan.buyGuard("hera", "week", reqId);
  assert.deepEqual([again.applied, again.balance, again.expires_at], [false, ok.balance, ok.expires_at]);
  const joined = rw.next("member.join");
  await fan.join("t-guard");
  const ev = await joined;
  assert.deepEqual([ev.user, ev.guard], ["gus", true]);
  const byRoom = await watcher.guards({ room: "t-guard" });
  assert.deepEqual(byRoom, { host: "hera", guards: [{ user: "gus", expires_at: ok.expires_at }] });
  await assert.rejects(
    watcher.buyGuard("hera", "week", uuidv7()),
    (e) => e instanceof ChorusError && e.code === "INSUFFICIENT_FUNDS",
  );
});

test("without a WebSocket option the client finds one (in Node the ws package, else the global)", async () => {
  const c = new Client({ url: fx.node.url, token: fx.node.token("nia") });
  clients.push(c);
  await c.connect();
  assert.equal(typeof (await c.ping()).t, "number");
});

test("in Node the ws package comes before a global WebSocket: a refused static token (401) stops the client", async () => {
  // A global WebSocket as Node 22's, which hides the 401 of a refused upgrade.
  const had = Object.getOwnPropertyDescriptor(globalThis, "WebSocket");
  globalThis.WebSocket = BrowserLike;
  try {
    const c = new Client({ url: fx.node.url, token: mint("not-the-node-secret", "rf-ann"), reconnect: { initialMs: 50, maxMs: 100 } });
    clients.push(c);
    const errors = [];
    c.on("error", (e) => errors.push(e));
    c.connect().catch(() => {});
    await until(() => c.state === "closed", 10_000, "the client stops");
    assert.equal(errors[0]?.code, "UNAUTHORIZED");
  } finally {
    if (had) Object.defineProperty(globalThis, "WebSocket", had);
    else delete globalThis.WebSocket;
  }
});

test("a static token that expires under the connection (1008) stops the client: no reconnect loop", async () => {
  // A token the server accepts now and that expires within 2 s; the heartbeat's tick closes
  // the connection with 1008 `token expired` shortly after.
  // As a browser sees it: no `on` to read a refused upgrade's status with.
  const c = new Client({ url: fx.node.url, token: fx.node.token("exp-ida", 2), WebSocket: BrowserLike });
  clients.push(c);
  const errors = [];
  c.on("error", (e) => errors.push(e));
  await c.connect();
  await until(() => c.state === "closed", 15_000, "the client stops");
  assert.equal(errors[0]?.code, "UNAUTHORIZED");
});

test("a suspended account is closed with 4003 and the client stops: no reconnect loop, the rooms end", async () => {
  const c = client("sus-ivy");
  const states = [];
  c.on("state", ({ state, reason }) => states.push([state, reason]));
  await c.connect();
  const room = await c.join("sus-room");
  const left = new Promise((r) => room.on("left", r));
  const put = await fx.node.admin("PUT", "/admin/users/sus-ivy/suspension", { reason: "test" });
  assert.equal(put.status, 200, JSON.stringify(put.body));
  await until(() => c.state === "closed", 15_000, "the client stops");
  assert.match(states.at(-1)[1], /4003/);
  assert.ok(!states.some(([st]) => st === "reconnecting"), JSON.stringify(states));
  await left;
  const del = await fx.node.admin("DELETE", "/admin/users/sus-ivy/suspension");
  assert.equal(del.status, 200, JSON.stringify(del.body));
});

test("a request that gets no reply in time fails with TIMEOUT", async () => {
  const c = client("tim");
  await c.connect();
  // A frame the server answers only after the room is routed cannot be guaranteed slow, so
  // the time-out is checked against a reply that can never come: the id is taken from under it.
  const p = c.request("ping", {}, { timeoutMs: 50 });
  c["pending"].clear();
  await assert.rejects(p, (e) => e instanceof ChorusError && e.code === "TIMEOUT" && e.retryable);
});

test("a join whose reply timed out while the node was frozen is sent again: client and server agree it is in", async () => {
  let joinsSent = 0;
  /** The ws socket, counting the joins it sends. */
  class Counting extends WebSocket {
    send(d, ...rest) {
      if (JSON.parse(String(d)).op === "room.join") joinsSent++;
      return super.send(d, ...rest);
    }
  }
  const host = client("jt-host");
  await host.connect();
  await host.join("jt");
  const c = client("jt-late", { WebSocket: Counting, requestTimeoutMs: 300 });
  await c.connect();
  const frozen = fx.node.child;
  frozen.kill("SIGSTOP");
  let settled = null;
  c.join("jt").then((room) => (settled = { room }), (error) => (settled = { error }));
  try {
    // The first join's reply cannot come in time: the join is rejected (before the fix) or
    // sent again.
    await until(() => settled || joinsSent >= 2, 5000, "the join's time-out");
  } finally {
    frozen.kill("SIGCONT");
  }
  // The node applies the join it received while frozen.
  const inRoom = async () => (await host.request("member.list", { room: "jt" })).members.some((m) => m.user === "jt-late");
  await until(inRoom, 10_000, "the server to have the user in the room");
  await until(() => settled, 10_000, "the join to settle");
  assert.equal(settled.error, undefined, "the client thinks it is out of a room the server put it in");
  assert.equal(settled.room.state, "joined");
  assert.ok(await inRoom());
});

test("a token provider answers session.expiring with auth.refresh", async () => {
  let calls = 0;
  const c = client("ria", {
    token: () => {
      calls++;
      // The first token expires in 40 s (session.expiring comes at once); later ones live an hour.
      return fx.node.token("ria", calls === 1 ? 40 : 3600);
    },
  });
  const refreshed = c.next("refreshed", () => true, 10_000);
  await c.connect();
  const { exp } = await refreshed;
  assert.ok(calls >= 2, "the provider was asked again");
  assert.ok(exp > Date.now() / 1000 + 600, `the connection now lives longer (exp ${exp})`);
});

test("a dropped socket reconnects and rejoins with since: missed chat is replayed, the seat kept", async () => {
  const a = client("ann");
  const b = client("ben");
  await Promise.all([a.connect(), b.connect()]);
  const ra = await a.join("t-resume");
  const rb = await b.join("t-resume");
  await ra.takeSeat(1);
  await until(() => rb.snapshot.seats[1].user === "ann", 5000, "ann seated");
  const states = [];
  a.on("state", (s) => states.push(s.state));
  const resumed = ra.next("resumed", () => true, 15_000);
  const got = [];
  ra.on("chat", (e) => got.push(e.text));
  a.dropConnection();
  await until(() => a.state !== "open", 5000, "ann's socket gone");
  // Sent while ann is away (inside the 5 s grace window: she keeps her place and seat).
  await rb.chat("missed 1");
  await rb.chat("missed 2");
  const r = await resumed;
  assert.equal(r.resync, false, "the history served the gap");
  assert.deepEqual(got.slice(0, 2), ["missed 1", "missed 2"]);
  assert.ok(states.includes("reconnecting") && states.at(-1) === "open", states.join(","));
  assert.equal(ra.snapshot.seats[1].user, "ann");
  const heard = rb.next("chat", (e) => e.text === "back");
  await ra.chat("back");
  await heard;
});

test("the snapshot's epoch and seq move with the position as events are applied", async () => {
  const a = client("snap-ann");
  const b = client("snap-bob");
  await Promise.all([a.connect(), b.connect()]);
  const ra = await a.join("t-snap-pos");
  const rb = await b.join("t-snap-pos");
  const at = { epoch: ra.snapshot.epoch, seq: ra.snapshot.seq };
  assert.deepEqual(at, ra.position, "the join reply's");
  await rb.chat("one");
  const { seq } = await rb.takeSeat(0).then(() => rb.chat("two"));
  await until(() => ra.position.seq === seq, 5000, "ann applied bob's events");
  assert.ok(seq > at.seq);
  assert.deepEqual({ epoch: ra.snapshot.epoch, seq: ra.snapshot.seq }, ra.position);
  assert.equal(ra.snapshot.seats[0].user, "snap-bob");
});

test("a gap in the sequence is repaired by a rejoin with since on the same connection", async () => {
  const a = client("gia");
  const b = client("gus");
  await Promise.all([a.connect(), b.connect()]);
  const ra = await a.join("t-gap");
  const rb = await b.join("t-gap");
  await rb.chat("one");
  await until(() => ra.position.seq === rb.position.seq, 5000, "gia caught up");
  // Pretend gia missed an event: move her position back by one.
  ra.position = { ...ra.position, seq: ra.position.seq - 1 };
  const texts = [];
  ra.on("chat", (e) => texts.push(e.text));
  const resumed = ra.next("resumed");
  await rb.chat("two");
  assert.equal((await resumed).resync, false);
  await until(() => texts.includes("two"), 5000, "the live event");
  assert.deepEqual(texts, ["one", "two"], "the missed event replayed first, then the rest, each once");
});

test("the room vocabulary through the typed API: apply-mode seats, moderation, the directory, the wallet, follows", async () => {
  const granted = await fx.node.admin("POST", "/admin/wallets/olga/grant", { amount: 70, key: "ts-olga-1" });
  assert.equal(granted.status, 200, JSON.stringify(granted.body));
  const o = client("olga");
  const m = client("max");
  await Promise.all([o.connect(), m.connect()]);
  await o.createRoom({ room: "t-apply", title: "Apply", seat_mode: "apply" });
  const ro = await o.join("t-apply");
  const rm = await m.join("t-apply");
  // A seat asked for, seen by the owner, listed and approved.
  const asked = ro.next("seat.request");
  const { expires_at } = await rm.requestSeat();
  assert.ok(expires_at > Date.now());
  assert.equal((await asked).user, "max");
  assert.deepEqual((await ro.seatRequests()).requests.map((r) => r.user), ["max"]);
  const { seat } = await ro.approveSeat("max");
  await until(() => rm.snapshot.seats[seat]?.user === "max", 5000, "max seated");
  // Chat muted and unmuted.
  await ro.muteChat("max", 60);
  await assert.rejects(rm.chat("muted?"), (e) => e.code === "CHAT_MUTED");
  await ro.unmuteChat("max");
  assert.ok((await rm.chat("back")).seq > 0);
  // Kicked with a ban: out of the room, on the ban list, and let back in.
  const left = rm.next("left");
  await ro.kick("max", 60);
  assert.equal((await left).reason, "kicked");
  assert.deepEqual((await ro.bans()).bans.map((b) => [b.user, b.by]), [["max", "olga"]]);
  await assert.rejects(m.join("t-apply"), (e) => e.code === "BANNED");
  await ro.unban("max");
  // Seats: all locked and unlocked at once, their number changed.
  await ro.lockAllSeats(true);
  await until(() => ro.snapshot.seats.every((x) => x.locked), 5000, "every seat locked");
  await ro.lockAllSeats(false);
  await ro.setSeatCount(6);
  await until(() => ro.snapshot.seats.length === 6, 5000, "six seats");
  // Direct messages from olga blocked, listed, unblocked.
  await m.blockIm("olga");
  assert.deepEqual((await m.imBlocks()).blocks, ["olga"]);
  await m.unblockIm("olga");
  assert.deepEqual((await m.imBlocks()).blocks, []);
  // The directory lists the room; the statement shows the grant; a follow shows where olga is.
  // Polled every 250 ms, within the connection's request rate.
  let listed;
  for (let i = 0; i < 40 && !listed; i++) {
    listed = (await m.listRooms()).rooms.find((r) => r.room === "t-apply");
    if (!listed) await new Promise((r) => setTimeout(r, 250));
  }
  assert.ok(listed, "t-apply listed within 10 s");
  assert.deepEqual([listed.title, listed.owner], ["Apply", "olga"]);
  const { movements } = await o.walletHistory();
  assert.deepEqual(movements.map((x) => [x.kind, x.account, x.amount]), [["grant", "coins", 70]]);
  assert.deepEqual(await m.follow("olga"), { added: true });
  assert.equal((await m.followCounts("olga")).followers, 1);
  assert.deepEqual((await m.followedRooms()).rooms, [{ room: "t-apply", users: ["olga"] }]);
  assert.deepEqual(await m.unfollow("olga"), { removed: true });
});

test("a rocket launch moves the room's position like any sequenced event: no gap follows it", async () => {
  // Its own node, with a rocket level that two hearts fill.
  const { mkdtempSync, rmSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const dir = mkdtempSync(join(tmpdir(), "chorus-ts-rocket-"));
  const config = join(dir, "rocket.toml");
  writeFileSync(config, "[[rocket_levels]]\nfuel = 100\ntop = [30]\npresent = 1\npresent_coins = 10\n");
  // The node reads its config at start only: the file's dir goes once the node started or failed.
  const n = await startNode({ args: ["--config", config] }).finally(() => rmSync(dir, { recursive: true, force: true }));
  try {
    const granted = await n.admin("POST", "/admin/wallets/rita/grant", { amount: 100, key: "ts-rita-1" });
    assert.equal(granted.status, 200, JSON.stringify(granted.body));
    const mk = (u) => {
      const c = new Client({ url: n.url, token: () => n.token(u), WebSocket, reconnect: { initialMs: 100, maxMs: 500 } });
      clients.push(c);
      return c;
    };
    const [r, s] = [mk("rita"), mk("sam")];
    await Promise.all([r.connect(), s.connect()]);
    const rr = await r.join("t-rocket");
    const rs = await s.join("t-rocket");
    await until(() => rr.snapshot.members === 2, 5000, "both in");
    const rejoins = [];
    rs.on("rejoining", (e) => rejoins.push(e.reason));
    const launches = [];
    rs.on("rocket.launch", (e) => launches.push(e));
    await rr.sendGift("heart", ["sam"]);
    await rr.sendGift("heart", ["sam"]);
    await until(() => launches.length === 1, 5000, "the launch");
    const launch = launches[0];
    assert.equal(typeof launch.seq, "number", JSON.stringify(launch));
    assert.equal(launch.by, "rita");
    assert.deepEqual(launch.rewards.find((w) => w.why === "top"), { user: "rita", coins: 30, why: "top" });
    const texts = [];
    rs.on("chat", (e) => texts.push(e));
    const ok = await rr.chat("after the launch");
    await until(() => texts.length === 1, 5000, "the chat after the launch");
    assert.equal(texts[0].seq, ok.seq);
    assert.ok(ok.seq > launch.seq);
    assert.deepEqual(rs.position, { epoch: launch.epoch, seq: ok.seq });
    assert.deepEqual(rejoins, [], "no gap, so no rejoin");
    assert.equal(launches.length, 1, "the launch was seen once");
  } finally {
    await n.cleanup();
  }
});

test("a node restart (1001) shows reconnecting, then the client resumes (resync) and works", async () => {
  // Its own node: the restart reuses the data dir and the ports.
  const n = await startNode();
  try {
    const token = (u) => () => n.token(u);
    const a = new Client({ url: n.url, token: token("rex"), WebSocket, reconnect: { initialMs: 100, maxMs: 500 } });
    clients.push(a);
    await a.connect();
    const ra = await a.join("t-restart");
    const closes = [];
    a.on("state", (s) => closes.push(s));
    const rejoining = ra.next("rejoining", () => true, 15_000);
    await n.stop("SIGTERM");
    await rejoining;
    assert.ok(closes.some((s) => s.state === "reconnecting" && /1001/.test(s.reason ?? "")), JSON.stringify(closes));
    const resumed = ra.next("resumed", () => true, 30_000);
    const n2 = await startNode({ dataDir: n.dataDir, ws: n.ws, admin: n.adminAddr, secret: n.secret, adminToken: n.adminToken });
    try {
      const r = await resumed;
      assert.equal(r.resync, true, "a standalone restart keeps no history");
      assert.equal(a.state, "open");
      const ok = await ra.chat("after restart");
      assert.ok(ok.seq >= 1 && ra.position !== null);
    } finally {
      await n2.cleanup();
    }
  } finally {
    await n.cleanup();
  }
});

test("a socket that stops delivering without a close is given up within a heartbeat or two, and the client resumes", async () => {
  // Its own node with a short heartbeat, behind a proxy that can swallow a connection whole:
  // nothing passes either way and nobody closes (a network gone dead).
  const n = await startNode({ args: ["--heartbeat-ms", "400"] });
  const net = await import("node:net");
  const [host, port] = [n.ws.split(":")[0], Number(n.ws.split(":")[1])];
  const swallowed = new Set();
  let swallow = false;
  const proxy = net.createServer((inbound) => {
    const outbound = net.connect(port, host);
    const dead = { on: false };
    if (swallow) dead.on = true;
    swallowed.add(dead);
    inbound.on("data", (b) => { if (!dead.on && !swallow) outbound.write(b); else dead.on = true; });
    outbound.on("data", (b) => { if (!dead.on && !swallow) inbound.write(b); else dead.on = true; });
    inbound.on("error", () => {});
    outbound.on("error", () => {});
    inbound.on("close", () => outbound.destroy());
  });
  await new Promise((r) => proxy.listen(0, "127.0.0.1", r));
  try {
    const url = `ws://127.0.0.1:${proxy.address().port}/ws`;
    const a = new Client({ url, token: () => n.token("liv"), WebSocket, reconnect: { initialMs: 100, maxMs: 300 } });
    clients.push(a);
    await a.connect();
    const ra = await a.join("t-alive");
    const states = [];
    a.on("state", (st) => states.push(st));
    const resumed = ra.next("resumed", () => true, 15_000);
    // The current connection goes dead; connections made after it pass again.
    swallow = true;
    await until(() => states.some((st) => st.state === "reconnecting"), 5_000, "the dead socket is given up");
    swallow = false;
    for (const d of swallowed) d.on = true;
    const r = await resumed;
    assert.equal(r.resync, false, "nothing was missed");
    assert.ok(states.some((st) => /no answer/.test(st.reason ?? "")), JSON.stringify(states));
    await ra.chat("alive again");
  } finally {
    proxy.close();
    await n.cleanup();
  }
});

test("with several gateways a failed connect and a dropped connection each move to the next one", async () => {
  // A second node that takes the same tokens; before both, a port nobody listens on.
  const n2 = await startNode({ secret: fx.node.secret });
  const net = await import("node:net");
  const free = net.createServer();
  await new Promise((r) => free.listen(0, "127.0.0.1", r));
  const dead = `ws://127.0.0.1:${free.address().port}/ws`;
  await new Promise((r) => free.close(r));
  try {
    const urls = [];
    class Spy extends WebSocket {
      constructor(url) {
        urls.push(url.split("?")[0]);
        super(url);
      }
    }
    const c = client("gw-ann", { url: [dead, fx.node.url, n2.url], WebSocket: Spy });
    c.connect().catch(() => {});
    await until(() => c.state === "open", 10_000, "connected through the second gateway");
    assert.deepEqual(urls, [dead, fx.node.url], "the refused gateway is left for the next");
    c.dropConnection();
    await until(() => urls.length === 3 && c.state === "open", 10_000, "reconnected");
    assert.equal(urls[2], n2.url, "a dropped connection goes to the next gateway");
    assert.equal(typeof (await c.ping()).t, "number");
  } finally {
    await n2.cleanup();
  }
});

test("a 503 with Retry-After at connect is honoured", async () => {
  const dataDir = (await import("node:fs")).mkdtempSync(join((await import("node:os")).tmpdir(), "chorus-ts-503-"));
  const cfg = join(dataDir, "chorus.toml");
  writeFileSync(cfg, "admit_per_sec = 1\nadmit_burst = 1\n");
  const n = await startNode({ dataDir, args: ["--config", cfg] });
  try {
    // The first connection takes the only admission token; the second is refused with 503.
    const first = new Client({ url: n.url, token: n.token("q1"), WebSocket });
    clients.push(first);
    await first.connect();
    const c = new Client({ url: n.url, token: n.token("q2"), WebSocket, reconnect: { initialMs: 50, maxMs: 100 } });
    clients.push(c);
    const states = [];
    c.on("state", (s) => states.push(s));
    const t0 = Date.now();
    await c.connect();
    const refused = states.find((s) => s.reason === "503 admission");
    assert.ok(refused, JSON.stringify(states));
    assert.ok(refused.delayMs >= 1000, `waited Retry-After (${refused.delayMs} ms), not the 50 ms backoff`);
    assert.ok(Date.now() - t0 >= 900);
    // One socket per client: the refused attempt left no second reconnect behind.
    await new Promise((r) => setTimeout(r, 1500));
    const metrics = await (await fetch(`http://${n.adminAddr}/metrics`)).text();
    const open = Number(/^chorus_gateway_connections(?:\{[^}]*\})? (\S+)$/m.exec(metrics)?.[1]);
    assert.equal(open, 2, "two clients, two sockets");
  } finally {
    await n.cleanup();
    (await import("node:fs")).rmSync(dataDir, { recursive: true, force: true });
  }
});
