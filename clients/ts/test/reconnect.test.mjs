// What the client does around reconnects, against a real node where it can show it, else against
// a server the test plays (test/fake.mjs) for the orders a node does not show on demand: a room
// left during a reconnect is not rejoined, a room's requests wait for its rejoin (the others do
// not), the liveness ping goes only after a quiet heartbeat interval, and a listener that throws,
// from a timer too, breaks nothing.
import { test } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import * as chorus from "../dist/index.js";
import { useFakeServers } from "./fake.mjs";
import { startNode, until, useNode } from "./node.mjs";

const fx = useNode({ initialMs: 100, maxMs: 1000 });
const { client } = fx;

const server = useFakeServers();

/** A WebSocket class that records every frame the client sends, `{ op, d, at }`. */
function spy() {
  const sent = [];
  class Spy extends WebSocket {
    send(text) {
      sent.push({ ...JSON.parse(text), at: sent.length });
      super.send(text);
    }
  }
  return { sent, Spy };
}

const { ChorusError } = chorus;
// Imported so: a build without ListenerError still runs the tests, and fails them.
const isListenerError = (e) => chorus.ListenerError !== undefined && e instanceof chorus.ListenerError;
const code = (c) => (e) => e instanceof ChorusError && e.code === c;

/** A fake client joined to room `id` at (1, 2): the client, its socket, the room. */
async function joinedFake(srv, id = "A") {
  const c = srv.client();
  const s = await srv.connect(c);
  const j = c.join(id);
  s.joined((await srv.sent(s, "room.join", 1))[0], 1, 2);
  return { c, s, room: await j };
}

// ---- leave() while reconnecting ----

test("leave() while the client reconnects ends the room at once, sends nothing, and the room is not rejoined", async () => {
  const { sent, Spy } = spy();
  // A slow reconnect: the leave comes well before it.
  const a = client("rl-ann", { WebSocket: Spy, reconnect: { initialMs: 1500, maxMs: 1500 } });
  const b = client("rl-bob");
  await Promise.all([a.connect(), b.connect()]);
  const ra = await a.join("t-leave-rc");
  const rb = await b.join("t-leave-rc");
  await ra.takeSeat(2);
  await until(() => rb.snapshot.seats[2].user === "rl-ann", 5000, "ann seated");
  a.dropConnection();
  await until(() => ra.state === "rejoining", 5000, "the room rejoining");
  const reasons = [];
  ra.on("left", (e) => reasons.push(e.reason));
  const before = sent.length;
  await ra.leave();
  assert.equal(ra.state, "left");
  assert.deepEqual(reasons, ["left"]);
  assert.equal(a.state, "reconnecting", "the leave did not wait for the connection");
  assert.deepEqual([...a.rooms.keys()], []);
  // The reconnect: no rejoin of the room, no leave that could only fail.
  await a.waitOpen(10_000);
  await a.ping();
  const roomOps = sent.slice(before).filter((f) => f.op.startsWith("room."));
  assert.deepEqual(roomOps, []);
  // The server agrees: the new connection is not in the room, and the old one's membership
  // ends with its grace window (the seat is freed).
  await assert.rejects(a.request("chat.send", { room: "t-leave-rc", text: "still here?" }), code("NOT_IN_ROOM"));
  await until(() => rb.snapshot.seats[2].user === null, 15_000, "ann's seat freed");
  assert.deepEqual(reasons, ["left"]);
});

test("leave() while the rejoin is in flight leaves after its answer, and only if it put the connection back in", async () => {
  for (const answer of ["joined", "refused"]) {
    const srv = server();
    const { c, s, room } = await joinedFake(srv);
    s.drop();
    const s2 = await srv.socket(1);
    s2.hello();
    const [rejoin] = await srv.sent(s2, "room.join", 1);
    assert.deepEqual(rejoin.d.since, { epoch: 1, seq: 2 });
    const reasons = [];
    room.on("left", (e) => reasons.push(e.reason));
    let done = false;
    const leaving = room.leave().then(() => (done = true));
    assert.equal(room.state, "left", "ended at once");
    assert.deepEqual(reasons, ["left"]);
    // The leave must not overtake the rejoin (the server could take it before the join).
    await new Promise((r) => setTimeout(r, 30));
    assert.deepEqual(s2.sentOps("room.leave"), [], "no leave before the rejoin's answer");
    assert.equal(done, false);
    if (answer === "joined") {
      s2.joined(rejoin, 1, 2);
      const [leave] = await srv.sent(s2, "room.leave", 1);
      s2.ok(leave, {});
    } else {
      s2.err(rejoin, "BANNED", "banned");
    }
    await leaving;
    if (answer === "refused") assert.deepEqual(s2.sentOps("room.leave"), [], "a refused rejoin left nothing to leave");
    assert.deepEqual(reasons, ["left"]);
    assert.deepEqual([...c.rooms.keys()], []);
    assert.deepEqual(s2.sentOps("room.join").length, 1, "not rejoined again");
    c.close();
  }
});

test("leave() while the first join is in flight ends the room at once and leaves after the join's answer", async () => {
  const srv = server();
  const c = srv.client();
  const s = await srv.connect(c);
  const joining = c.join("A");
  const [join] = await srv.sent(s, "room.join", 1);
  const room = c.rooms.get("A");
  const leaving = room.leave();
  assert.equal(room.state, "left");
  await new Promise((r) => setTimeout(r, 30));
  assert.deepEqual(s.sentOps("room.leave"), [], "no leave before the join's answer");
  s.joined(join, 1, 0);
  assert.equal(await joining, room, "the join resolves with the room, ended");
  assert.equal(room.state, "left");
  const [leave] = await srv.sent(s, "room.leave", 1);
  s.ok(leave, {});
  await leaving;
  assert.deepEqual([...c.rooms.keys()], []);
  // A join of the room made after the leave is a new join, answered and kept.
  const again = c.join("A");
  s.joined((await srv.sent(s, "room.join", 2))[1], 1, 1);
  const a2 = await again;
  assert.notEqual(a2, room);
  assert.equal(a2.state, "joined");
  c.close();
});

test("a join of another room left before its answer still takes the connection out of the room it was in", async () => {
  const srv = server();
  const { c, s, room: a } = await joinedFake(srv);
  const aLeft = a.next("left", () => true, 5000);
  const jb = c.join("B");
  const [, fb] = await srv.sent(s, "room.join", 2);
  const b = c.rooms.get("B");
  const leaving = b.leave();
  assert.equal(b.state, "left");
  // B's join succeeds: the server moved the connection from A to B (section 4.3), then B is left.
  s.joined(fb, 1, 0);
  assert.equal(await jb, b);
  assert.deepEqual(await aLeft, { reason: "switched" }, "A is not believed joined");
  const [leave] = await srv.sent(s, "room.leave", 1);
  assert.equal(leave.d.room, "B");
  s.ok(leave, {});
  await leaving;
  assert.deepEqual([...c.rooms.keys()], []);
  c.close();
});

// ---- requests while reconnecting ----

test("requests made while the client reconnects: the room's go after its rejoin (chat, seat, gift), a ping at once", async () => {
  const granted = await fx.node.admin("POST", "/admin/wallets/rq-ann/grant", { amount: 100, key: "ts-rq-ann-1" });
  assert.equal(granted.status, 200, JSON.stringify(granted.body));
  const { sent, Spy } = spy();
  const a = client("rq-ann", { WebSocket: Spy, reconnect: { initialMs: 300, maxMs: 300 } });
  const b = client("rq-bob");
  await Promise.all([a.connect(), b.connect()]);
  const ra = await a.join("t-req-rc");
  const rb = await b.join("t-req-rc");
  await until(() => ra.snapshot.members === 2, 5000, "both in");
  a.dropConnection();
  await until(() => ra.state === "rejoining" && a.state === "reconnecting", 5000, "reconnecting");
  const heard = rb.next("chat", (e) => e.text === "while away", 15_000);
  const before = sent.length;
  const [chat, seat, gift, pong] = await Promise.all([
    ra.chat("while away"),
    ra.takeSeat(4),
    ra.sendGift("rose", ["rq-bob"]),
    a.ping(),
  ]);
  assert.equal(typeof chat.seq, "number");
  assert.equal(seat.seat, 4);
  assert.equal(typeof gift.balance, "number");
  assert.equal(typeof pong.t, "number");
  assert.equal((await heard).from, "rq-ann");
  await until(() => rb.snapshot.seats[4].user === "rq-ann", 5000, "bob sees ann seated");
  const ops = sent.slice(before).map((f) => f.op);
  const join = ops.indexOf("room.join");
  assert.ok(join >= 0, ops.join(","));
  for (const op of ["chat.send", "seat.take", "gift.send"]) {
    assert.ok(ops.indexOf(op) > join, `${op} after the rejoin: ${ops.join(",")}`);
  }
  assert.ok(ops.indexOf("ping") < join, `the ping did not wait for the room: ${ops.join(",")}`);
  assert.equal(ops.filter((op) => op === "gift.send").length, 1, "the gift went once");
});

test("after a reconnect a room's requests wait for the rejoin's answer; a refused rejoin fails them unsent", async () => {
  const srv = server();
  const { c, s, room } = await joinedFake(srv);
  // Made while the connection is down.
  s.drop();
  const chat = room.chat("hi");
  const ping = c.ping();
  const s2 = await srv.socket(1);
  s2.hello();
  const [rejoin] = await srv.sent(s2, "room.join", 1);
  const [p] = await srv.sent(s2, "ping", 1);
  s2.ok(p, { t: 1 });
  await ping;
  // Made while the rejoin is in flight.
  const seat = room.takeSeat(0);
  await new Promise((r) => setTimeout(r, 30));
  assert.deepEqual(s2.sent.map((f) => f.op).sort(), ["ping", "room.join"], "the room's requests wait for the rejoin");
  s2.joined(rejoin, 1, 2);
  const [ch] = await srv.sent(s2, "chat.send", 1);
  const [st] = await srv.sent(s2, "seat.take", 1);
  s2.ok(ch, { seq: 3 });
  s2.ok(st, { seat: 0 });
  assert.deepEqual(await chat, { seq: 3 });
  assert.deepEqual(await seat, { seat: 0 });
  // A gift in flight when the connection drops, and a chat made meanwhile: the rejoin is refused.
  const gift = room.sendGift("rose", ["bob"]).catch((e) => e);
  const [g] = await srv.sent(s2, "gift.send", 1);
  s2.drop();
  const chat2 = room.chat("again").catch((e) => e);
  const s3 = await srv.socket(2);
  s3.hello();
  s3.err((await srv.sent(s3, "room.join", 1))[0], "BANNED", "banned until 1700000000000");
  const e = await chat2;
  assert.ok(e instanceof ChorusError, String(e));
  assert.equal(e.code, "BANNED", "the rejoin's error");
  assert.equal(e.op, "chat.send");
  const ge = await gift;
  assert.equal(ge.code, "DISCONNECTED", "the gift's outcome is unknown: its answer was lost");
  assert.equal(ge.reqId, g.d.req_id);
  assert.deepEqual(s3.sent.map((f) => f.op), ["room.join"], "nothing sent for a room not rejoined");
  assert.equal(room.state, "left");
  c.close();
});

test("a gift cut off by a reconnect goes again with its reqId after the rejoin's answer", async () => {
  const srv = server();
  const { c, s, room } = await joinedFake(srv);
  const gift = room.sendGift("rose", ["bob"]);
  const [g] = await srv.sent(s, "gift.send", 1);
  s.drop();
  const s2 = await srv.socket(1);
  s2.hello();
  const [rejoin] = await srv.sent(s2, "room.join", 1);
  // The gift's retry waits its backoff, then the room: not before the rejoin's answer.
  await new Promise((r) => setTimeout(r, 400));
  assert.deepEqual(s2.sentOps("gift.send"), []);
  s2.joined(rejoin, 1, 2);
  const [g2] = await srv.sent(s2, "gift.send", 1);
  assert.equal(g2.d.req_id, g.d.req_id, "the same order");
  s2.ok(g2, { order: "o", balance: 90 });
  assert.deepEqual(await gift, { order: "o", balance: 90 });
  c.close();
});

// ---- the liveness ping ----

test("the liveness ping goes only after a quiet heartbeat interval: never while frames or the node's pings arrive", async () => {
  const n = await startNode({ args: ["--heartbeat-ms", "400"] });
  try {
    const { sent, Spy } = spy();
    // A socket as a browser's: the node's pings are answered unseen.
    const seen = [];
    class BrowserLike {
      constructor(url) {
        this.ws = new WebSocket(url);
      }
      get readyState() { return this.ws.readyState; }
      send(d) { seen.push(JSON.parse(d).op); this.ws.send(d); }
      close(code, reason) { this.ws.close(code, reason); }
      set onopen(f) { this.ws.onopen = f; }
      set onmessage(f) { this.ws.onmessage = f; }
      set onclose(f) { this.ws.onclose = f; }
      set onerror(f) { this.ws.onerror = f; }
    }
    const mk = (user, opts = {}) => client(user, { url: n.url, token: n.token(user), ...opts });
    const a = mk("hb-ann", { WebSocket: Spy });
    const b = mk("hb-bob");
    const w = mk("hb-web", { WebSocket: BrowserLike });
    await Promise.all([a.connect(), b.connect(), w.connect()]);
    const ra = await a.join("t-hb");
    const rb = await b.join("t-hb");
    await until(() => ra.snapshot.members === 2, 5000, "both in");
    const pings = () => sent.filter((f) => f.op === "ping").length;
    // Frames keep arriving (bob chats every 50 ms, five heartbeat intervals): no ping.
    const p0 = pings();
    let end = Date.now() + 2000;
    while (Date.now() < end) {
      await rb.chat("busy");
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(pings() - p0, 0, "no ping while frames arrive");
    // Quiet but for the node's pings, which Node's ws shows: no ping either.
    const p1 = pings();
    const w1 = seen.filter((op) => op === "ping").length;
    end = Date.now() + 3200;
    while (Date.now() < end) await new Promise((r) => setTimeout(r, 100));
    assert.equal(pings() - p1, 0, "the node's pings show the socket delivers");
    assert.equal(a.state, "open");
    // Where the node's pings are not seen, a quiet interval is a reason to ask.
    assert.ok(seen.filter((op) => op === "ping").length - w1 >= 2, seen.join(","));
    assert.equal(w.state, "open");
  } finally {
    await n.cleanup();
  }
});

// ---- listeners that throw ----

test("a listener that throws breaks nothing: it is reported as the client's error event, or on the console", async () => {
  const srv = server();
  const c = srv.client();
  const errors = [];
  c.on("error", (e) => errors.push(e));
  c.on("state", () => {
    throw new Error("state listener bug");
  });
  const s = await srv.connect(c);
  const j = c.join("A");
  s.joined((await srv.sent(s, "room.join", 1))[0], 1, 2);
  const room = await j;
  room.on("rejoining", () => {
    throw new Error("rejoining listener bug");
  });
  const resumed = room.next("resumed", () => true, 5000);
  // The reconnect runs from timers: its state changes reach the throwing listener there.
  s.drop();
  const s2 = await srv.socket(1);
  s2.hello();
  s2.joined((await srv.sent(s2, "room.join", 1))[0], 1, 2);
  await resumed;
  assert.equal(c.state, "open");
  assert.ok(errors.length >= 2, errors.map(String).join("; "));
  assert.ok(errors.every((e) => isListenerError(e)));
  assert.deepEqual([...new Set(errors.map((e) => e.event))].sort(), ["rejoining", "state"]);
  assert.ok(errors.some((e) => e.cause?.message === "rejoining listener bug"));
  // Without an `error` listener: the console, and still nothing breaks.
  const logged = [];
  const orig = console.error;
  console.error = (e) => logged.push(e);
  try {
    const c2 = srv.client();
    c2.on("state", () => {
      throw new Error("no error listener");
    });
    c2.on("hello", () => {
      throw "not even an Error";
    });
    const n = srv.sockets.length;
    const open = c2.connect();
    (await srv.socket(n)).hello();
    await open;
    srv.sockets[n].drop();
    (await srv.socket(n + 1)).hello();
    await c2.waitOpen(5000);
    assert.equal(c2.state, "open");
    assert.ok(logged.length >= 3, String(logged.length));
    assert.ok(logged.every((e) => isListenerError(e)));
    assert.ok(logged.some((e) => e.event === "hello" && e.cause === "not even an Error"));
    c2.close();
  } finally {
    console.error = orig;
  }
  // A listener of `error` that throws goes to the console, not round again.
  c.on("error", () => {
    throw new Error("error listener bug");
  });
  const logged2 = [];
  console.error = (e) => logged2.push(e);
  try {
    const k = srv.sockets.length;
    s2.drop();
    (await srv.socket(k)).hello();
    await c.waitOpen(5000);
    c.close();
  } finally {
    console.error = orig;
  }
  assert.ok(logged2.some((e) => isListenerError(e) && e.event === "error"));
});
