// Direct messages through the client against a real standalone node: acknowledged delivery
// (section 13.7) is asked for and acknowledged by itself, a message the server sends again
// after a dropped connection reaches the application once, and an acknowledged one is not owed
// to the next connection; a typed message arrives with its type and data. A spy socket counts
// the raw `im` frames, to show the server did send the duplicate the client dropped.
import { test } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { until, useNode } from "./node.mjs";

const fx = useNode({ initialMs: 100, maxMs: 500 });
const { client } = fx;

/** A `ws` socket that records the ids of the `im` frames it receives. */
function spySocket(frames) {
  return class extends WebSocket {
    constructor(url) {
      super(url);
      this.on("message", (data) => {
        const f = JSON.parse(String(data));
        if (f.ev === "im") frames.push(f.d.id);
      });
    }
  };
}

test("a message sent again after a dropped connection reaches the application once, then is acknowledged", async () => {
  const ann = client("im-ann");
  const frames = [];
  // Acknowledgements wait long: the connection drops before the first one goes.
  const bob = client("im-bob", { WebSocket: spySocket(frames), imAckDelayMs: 60_000 });
  await Promise.all([ann.connect(), bob.connect()]);
  assert.equal(bob.session.im_ack, true, "the connection asked for acknowledged delivery");
  const got = [];
  bob.on("im", (m) => got.push(m.id));
  const first = await ann.sendIm("im-bob", "one");
  await until(() => got.includes(first.id), 5000, "the first message");

  // Not acknowledged: after the reconnect the server sends it again, and the client drops it.
  bob.dropConnection();
  await until(() => bob.state !== "open", 5000, "bob's socket gone");
  await bob.waitOpen(10_000);
  const second = await ann.sendIm("im-bob", "two");
  await until(() => got.includes(second.id), 5000, "the second message");
  assert.deepEqual(got, [first.id, second.id], "each message once");
  assert.deepEqual(
    frames.filter((id) => id === first.id).length,
    2,
    `the server sent the first message again (frames ${frames})`,
  );

  // Once acknowledged, the next connection is owed nothing.
  await bob.ackIms();
  bob.close();
  const frames2 = [];
  const bob2 = client("im-bob", { WebSocket: spySocket(frames2) });
  await bob2.connect();
  const got2 = [];
  bob2.on("im", (m) => got2.push(m.id));
  const third = await ann.sendIm("im-bob", "three");
  await until(() => got2.includes(third.id), 5000, "the third message");
  assert.deepEqual(frames2, [third.id], "nothing owed before the live message");
});

test("the client acknowledges on its own within imAckDelayMs", async () => {
  const ann = client("ack-ann");
  // A spy that records the ids of the client's `im.ack` requests and of the replies.
  const acks = [];
  const replies = new Set();
  class Spy extends WebSocket {
    constructor(url) {
      super(url);
      this.on("message", (data) => {
        const f = JSON.parse(String(data));
        if (typeof f.re === "number" && f.ok) replies.add(f.re);
      });
    }
    send(text) {
      const f = JSON.parse(text);
      if (f.op === "im.ack") acks.push({ id: f.id, ids: f.d.ids });
      super.send(text);
    }
  }
  const bob = client("ack-bob", { WebSocket: Spy, imAckDelayMs: 20 });
  await Promise.all([ann.connect(), bob.connect()]);
  const got = [];
  bob.on("im", (m) => got.push(m.id));
  const ids = [];
  for (const t of ["a", "b", "c"]) ids.push((await ann.sendIm("ack-bob", t)).id);
  await until(() => got.length === 3, 5000, "three messages");
  await until(
    () => ids.every((id) => acks.some((a) => a.ids.includes(id) && replies.has(a.id))),
    5000,
    "every message acknowledged and the acknowledgement answered",
  );
  // A raw acknowledging connection of bob's that never acknowledges shows what is still owed:
  // nothing, so the first `im` it gets is the next live message.
  const probe = new WebSocket(`${fx.node.url}?token=${fx.node.token("ack-bob")}&im_ack=1`);
  const frames = [];
  probe.on("message", (data) => {
    const f = JSON.parse(String(data));
    if (f.ev === "im") frames.push(f.d.id);
  });
  await new Promise((resolve, reject) => {
    probe.once("open", resolve);
    probe.once("error", reject);
  });
  const live = await ann.sendIm("ack-bob", "after");
  await until(() => frames.includes(live.id), 5000, "the probe's live message");
  probe.terminate();
  assert.deepEqual(frames, [live.id], "nothing was owed");
});

test("imAck: false keeps the old rule (no im_ack in hello, no acknowledgements)", async () => {
  const ann = client("old-ann");
  const bob = client("old-bob", { imAck: false });
  await Promise.all([ann.connect(), bob.connect()]);
  assert.equal(bob.session.im_ack, undefined);
  const got = [];
  bob.on("im", (m) => got.push(m.text));
  await ann.sendIm("old-bob", "hi");
  await until(() => got.length === 1, 5000, "the message");
  const page = await bob.imHistory({ with: "old-ann" });
  assert.deepEqual(
    page.messages.map((m) => m.text),
    ["hi"],
  );
});

test("a typed message (a room invitation) arrives with its type and data", async () => {
  const ann = client("typed-ann");
  const bob = client("typed-bob");
  await Promise.all([ann.connect(), bob.connect()]);
  const got = [];
  bob.on("im", (m) => got.push(m));
  const sent = await ann.sendTypedIm("typed-bob", "room.invite", { room: "late-night" }, "ann invites you to Late Night");
  await until(() => got.length === 1, 5000, "the invitation");
  assert.deepEqual([got[0].id, got[0].type, got[0].data, got[0].text], [sent.id, "room.invite", { room: "late-night" }, "ann invites you to Late Night"]);
  await assert.rejects(ann.sendTypedIm("typed-bob", "no spaces", null, "x"), (e) => e.code === "BAD_REQUEST");
  ann.close();
  bob.close();
});
