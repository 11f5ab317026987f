// The client against a server the test plays (test/fake.mjs), for what a real node does not
// show on demand: replies in another order than their requests, a ledger that stays
// unavailable, a rejoin refused while a gift waits for it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ChorusError } from "../dist/index.js";
import { useFakeServers } from "./fake.mjs";
import { until } from "./node.mjs";

const server = useFakeServers();

/** The room of every `room.join` sent, in order. */
const joinsSent = (s) => s.sentOps("room.join").map((f) => f.d.room);

test("two joins answered in reverse order end in the room of the last one sent", async () => {
  const srv = server();
  const c = srv.client();
  const s = await srv.connect(c);
  const ja = c.join("A");
  const jb = c.join("B");
  const [fa, fb] = await srv.sent(s, "room.join", 2);
  assert.deepEqual(joinsSent(s), ["A", "B"]);
  s.joined(fb);
  const b = await jb;
  s.joined(fa);
  const a = await ja;
  assert.equal(a.state, "left", "A's late reply does not bring it back");
  assert.equal(b.state, "joined");
  assert.deepEqual([...c.rooms.keys()], ["B"]);
  const chats = [];
  b.on("chat", (e) => chats.push(e.text));
  s.push({ ev: "chat", room: "B", epoch: 1, seq: 1, d: { from: "x", text: "in b" } });
  assert.deepEqual(chats, ["in b"]);
});

test("A → B → A without waiting ends in A, whatever order the replies come in", async () => {
  const srv = server();
  const c = srv.client();
  const s = await srv.connect(c);
  const joins = [c.join("A"), c.join("B"), c.join("A")];
  const frames = await srv.sent(s, "room.join", 3);
  assert.deepEqual(joinsSent(s), ["A", "B", "A"], "the last join goes out, after B's");
  // Last first.
  s.joined(frames[2], 1, 4);
  s.joined(frames[1]);
  s.joined(frames[0], 1, 3);
  const [a, b, a2] = await Promise.all(joins);
  assert.equal(a2, a);
  assert.deepEqual([a.state, b.state], ["joined", "left"]);
  assert.deepEqual(a.position, { epoch: 1, seq: 4 }, "the reply of the last join is the room's state, not an older one");
  assert.deepEqual([...c.rooms.keys()], ["A"]);
});

test("from a joined room, B then A again without waiting ends in A: the second join of A is sent", async () => {
  const srv = server();
  const c = srv.client();
  const s = await srv.connect(c);
  const ja = c.join("A");
  s.joined((await srv.sent(s, "room.join", 1))[0], 1, 2);
  const a = await ja;
  const aLeft = [];
  a.on("left", (e) => aLeft.push(e.reason));
  const jb = c.join("B");
  const ja2 = c.join("A");
  const [, fb, fa2] = await srv.sent(s, "room.join", 3);
  assert.deepEqual(joinsSent(s), ["A", "B", "A"]);
  assert.deepEqual(fa2.d.since, { epoch: 1, seq: 2 }, "A is resumed from where it was");
  // B's reply first: the connection passes through B, then A's join takes it back.
  s.joined(fb);
  const b = await jb;
  assert.equal(a.state, "rejoining", "A is not ended by B while its own later join goes");
  s.joined(fa2, 1, 2);
  assert.equal(await ja2, a);
  assert.deepEqual([a.state, b.state], ["joined", "left"]);
  assert.deepEqual(aLeft, []);
  assert.deepEqual([...c.rooms.keys()], ["A"]);
});

test("a failed join changes nothing: the connection stays in the room it was in", async () => {
  const srv = server();
  const c = srv.client();
  const s = await srv.connect(c);
  const ja = c.join("A");
  s.joined((await srv.sent(s, "room.join", 1))[0]);
  const a = await ja;
  const jb = c.join("B");
  const [, fb] = await srv.sent(s, "room.join", 2);
  s.err(fb, "ROOM_LOCKED", "password");
  await assert.rejects(jb, (e) => e.code === "ROOM_LOCKED");
  assert.equal(a.state, "joined");
  assert.deepEqual([...c.rooms.keys()], ["A"]);
});

test("a gap while a join of another room goes waits for it: the rejoin is not sent, the room is switched", async () => {
  const srv = server();
  const c = srv.client();
  const s = await srv.connect(c);
  const ja = c.join("A");
  s.joined((await srv.sent(s, "room.join", 1))[0]);
  const a = await ja;
  const jb = c.join("B");
  const [, fb] = await srv.sent(s, "room.join", 2);
  // An event of A past a gap: A would rejoin, which sent after B's join would take the
  // connection back to A.
  s.push({ ev: "chat", room: "A", epoch: 1, seq: 5, d: { from: "x", text: "late" } });
  assert.equal(a.state, "rejoining");
  s.joined(fb);
  const b = await jb;
  await until(() => a.state === "left", 5000, "A switched");
  assert.equal(b.state, "joined");
  assert.deepEqual(joinsSent(s), ["A", "B"], "no rejoin of A after B's join");
  assert.deepEqual([...c.rooms.keys()], ["B"]);
});

test("a gift whose attempts run out on UNAVAILABLE rejects with that code and the reqId every attempt carried", async () => {
  const srv = server();
  const c = srv.client();
  const s = await srv.connect(c);
  const ja = c.join("A");
  s.joined((await srv.sent(s, "room.join", 1))[0]);
  const a = await ja;
  const gift = a.sendGift("rose", ["bob"], { attempts: 2 }).catch((e) => e);
  s.err((await srv.sent(s, "gift.send", 1))[0], "UNAVAILABLE", "ledger busy; retry with the same req_id");
  s.err((await srv.sent(s, "gift.send", 2))[1], "UNAVAILABLE", "ledger busy; retry with the same req_id");
  const e = await gift;
  assert.ok(e instanceof ChorusError, String(e));
  assert.equal(e.code, "UNAVAILABLE");
  assert.ok(e.retryable);
  const keys = s.sentOps("gift.send").map((f) => f.d.req_id);
  assert.equal(keys.length, 2);
  assert.deepEqual([e.reqId, e.reqId], keys, "the key the caller sends the gift again with");
});

test("a gift cut off by a disconnect whose room is then refused rejects as unknown, with its reqId", async () => {
  const srv = server();
  const c = srv.client();
  const s = await srv.connect(c);
  const ja = c.join("A");
  s.joined((await srv.sent(s, "room.join", 1))[0]);
  const a = await ja;
  const gift = a.sendGift("rose", ["bob"]).catch((e) => e);
  const [sent] = await srv.sent(s, "gift.send", 1);
  // The reply is lost with the connection: the order may have been debited.
  s.drop();
  const s2 = await srv.socket(1);
  s2.hello();
  // The rejoin is refused: the room ends before the gift could be sent again.
  s2.err((await srv.sent(s2, "room.join", 1))[0], "BANNED", "banned");
  const e = await gift;
  assert.ok(e instanceof ChorusError, String(e));
  assert.equal(a.state, "left");
  assert.equal(e.code, "DISCONNECTED", e.message);
  assert.match(e.message, /outcome unknown/);
  assert.ok(e.retryable, "the outcome is unknown: send it again");
  assert.equal(e.reqId, sent.d.req_id);
  assert.deepEqual(s2.sentOps("gift.send"), [], "not sent again outside the room");
});

test("a join of a room right after leaving it is sent after the leave and wins", async () => {
  const srv = server();
  const c = srv.client();
  const s = await srv.connect(c);
  const ja = c.join("A");
  s.joined((await srv.sent(s, "room.join", 1))[0], 1, 2);
  const a = await ja;
  const leaving = a.leave();
  const again = c.join("A");
  const [leave] = await srv.sent(s, "room.leave", 1);
  const [, join] = await srv.sent(s, "room.join", 2);
  assert.ok(s.sent.indexOf(leave) < s.sent.indexOf(join), "the join goes out after the leave");
  s.ok(leave, {});
  await leaving;
  s.joined(join, 1, 4);
  const a2 = await again;
  assert.notEqual(a2, a);
  assert.deepEqual([a.state, a2.state], ["left", "joined"]);
  assert.deepEqual([...c.rooms.keys()], ["A"]);
  assert.equal(c.rooms.get("A"), a2);
});

for (const [code, reason] of [[4001, "too many connections for this user"], [1008, "token expired"]]) {
  test(`a close that stops the client (${code} ${reason}) ends its rooms, as close() does`, async () => {
    const srv = server();
    const c = srv.client();
    const s = await srv.connect(c);
    const ja = c.join("A");
    s.joined((await srv.sent(s, "room.join", 1))[0], 1, 2);
    const a = await ja;
    const left = a.next("left", () => true, 5000);
    s.drop(code, reason);
    assert.equal(c.state, "closed", "a static token or a 4001 is not tried again");
    assert.deepEqual(await left, { reason: "client_closed" });
    assert.equal(a.state, "left");
    assert.deepEqual([...c.rooms.keys()], [], "the client keeps no room it will never rejoin");
  });
}

test("connect() after close() starts afresh: connecting, and the backoff from its first step", async () => {
  const srv = server();
  const c = srv.client({ reconnect: { initialMs: 5, maxMs: 5000 } });
  const s = await srv.connect(c);
  // Two failed reconnects grow the backoff.
  s.drop();
  (await srv.socket(1)).drop();
  (await srv.socket(2)).drop();
  await srv.socket(3);
  c.close();
  const states = [];
  c.on("state", (e) => states.push(e));
  void c.connect().catch(() => {});
  (await srv.socket(4)).drop();
  await until(() => states.some((e) => e.delayMs !== undefined), 5000, "a retry scheduled");
  assert.equal(states[0].state, "connecting", "a new start, not a reconnect of the closed connection");
  const retry = states.find((e) => e.delayMs !== undefined);
  assert.equal(retry.attempt, 1, "the first failure after connect() waits the first backoff step");
  assert.ok(retry.delayMs <= 5, `delay ${retry.delayMs} ms`);
  c.close();
});

test("a server that accepts and closes at once is retried with a growing backoff; a lasting connection resets it", async () => {
  const srv = server();
  const c = srv.client({ reconnect: { initialMs: 5, maxMs: 5000 } });
  const retries = [];
  c.on("state", (e) => {
    if (e.delayMs !== undefined) retries.push(e.attempt);
  });
  const hello = (s, heartbeatMs) => {
    s.readyState = 1;
    s.push({ ev: "hello", d: { session: "s", heartbeat_ms: heartbeatMs, server: "fake" } });
  };
  const n = srv.sockets.length;
  const open = c.connect();
  hello(await srv.socket(n), 60_000);
  await open;
  // Four connections closed right after their hello (as a flood close or a failing node).
  srv.sockets[n].drop(4000, "slow consumer");
  for (let i = 1; i <= 3; i++) {
    const s = await srv.socket(n + i);
    hello(s, 60_000);
    s.drop(4000, "slow consumer");
  }
  await until(() => retries.length === 4, 5000, "four retries");
  assert.deepEqual(retries, [1, 2, 3, 4], "each short-lived connection counts as a failed attempt");
  // One that lasts its heartbeat interval (here 20 ms) was a success: the next retry starts over.
  const s = await srv.socket(n + 4);
  hello(s, 20);
  await new Promise((r) => setTimeout(r, 40));
  s.drop(4000, "slow consumer");
  await until(() => retries.length === 5, 5000, "a fifth retry");
  assert.equal(retries[4], 1, "the backoff starts over after a lasting connection");
  c.close();
});

test("a socket that delivers frames while its ping answer is late is not given up", async () => {
  const srv = server();
  const c = srv.client();
  const n = srv.sockets.length;
  const open = c.connect();
  const s = await srv.socket(n);
  s.readyState = 1;
  s.push({ ev: "hello", d: { session: "s", heartbeat_ms: 100, server: "fake" } });
  await open;
  // After a quiet heartbeat interval the client asks `ping`; the answer waits behind frames
  // that keep coming (a backlog draining over a slow link): the socket is alive. A frame
  // follows every ping at once, and more keep coming.
  const send = s.send.bind(s);
  s.send = (text) => {
    send(text);
    if (JSON.parse(text).op === "ping") queueMicrotask(() => s.push({ ev: "notice.later", d: {} }));
  };
  const states = [];
  c.on("state", (e) => states.push(e.state));
  await srv.sent(s, "ping", 1);
  const asked = Date.now();
  while (Date.now() - asked < 350) {
    s.push({ ev: "notice.later", d: {} });
    await new Promise((r) => setTimeout(r, 20));
  }
  // The ping's time-out (one interval) has passed three times over.
  assert.deepEqual(states, [], "still open");
  assert.equal(srv.sockets.length, n + 1, "no new socket");
  s.ok(s.sentOps("ping")[0], { t: 1 });
  c.close();
});
