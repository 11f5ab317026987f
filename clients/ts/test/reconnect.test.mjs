// What the client does around reconnects, against a real node where it can show it, else against
// a server the test plays (test/fake.mjs) for the orders a node does not show on demand: a
// listener that throws, from a timer too, breaks nothing.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import * as chorus from "../dist/index.js";
import { fakeServer } from "./fake.mjs";

const servers = [];
function server() {
  const s = fakeServer();
  servers.push(s);
  return s;
}
after(() => {
  for (const s of servers) s.closeAll();
});

// Imported so: a build without ListenerError still runs the tests, and fails them.
const isListenerError = (e) => chorus.ListenerError !== undefined && e instanceof chorus.ListenerError;

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
