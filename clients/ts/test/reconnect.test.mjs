// What the client does around reconnects, against a real node where it can show it, else against
// a server the test plays (test/fake.mjs) for the orders a node does not show on demand: the
// liveness ping goes only after a quiet heartbeat interval, and a listener that throws, from a
// timer too, breaks nothing.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import * as chorus from "../dist/index.js";
import { fakeServer } from "./fake.mjs";
import { startNode, until, useNode } from "./node.mjs";

const fx = useNode({ initialMs: 100, maxMs: 1000 });
const { client } = fx;

const servers = [];
function server() {
  const s = fakeServer();
  servers.push(s);
  return s;
}
after(() => {
  for (const s of servers) s.closeAll();
});

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

// Imported so: a build without ListenerError still runs the tests, and fails them.
const isListenerError = (e) => chorus.ListenerError !== undefined && e instanceof chorus.ListenerError;

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
