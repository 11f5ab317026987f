// A fake socket for the cases a real node cannot be made to show on demand: replies that come
// back in another order than their requests, or that never come. The test plays the server:
// it reads the frames the client sent and answers them in the order it chooses.
import { after } from "node:test";
import { Client } from "../dist/index.js";
import { until } from "./node.mjs";

/**
 * For a test file: a maker of fake servers (`fakeServer()`) whose sockets are all closed once
 * the file's tests are done.
 */
export function useFakeServers() {
  const servers = [];
  after(() => {
    for (const s of servers) s.closeAll();
  });
  return () => {
    const s = fakeServer();
    servers.push(s);
    return s;
  };
}

/** A server played by the test: the sockets the clients opened, oldest first. */
export function fakeServer() {
  const sockets = [];
  class FakeSocket {
    constructor(url) {
      this.url = url;
      this.readyState = 0;
      this.sent = [];
      this.onopen = this.onmessage = this.onclose = this.onerror = null;
      sockets.push(this);
    }
    send(text) {
      this.sent.push(JSON.parse(text));
    }
    close(code = 1000, reason = "") {
      if (this.readyState === 3) return;
      this.readyState = 3;
      queueMicrotask(() => this.onclose?.({ code, reason }));
    }
    /** Delivers a frame to the client. */
    push(frame) {
      this.onmessage?.({ data: JSON.stringify(frame) });
    }
    hello() {
      this.readyState = 1;
      this.push({ ev: "hello", d: { session: "s", heartbeat_ms: 60_000, server: "fake" } });
    }
    /** The server closes the socket (1006: it dropped). */
    drop(code = 1006, reason = "") {
      this.readyState = 3;
      this.onclose?.({ code, reason });
    }
    /** The requests sent with `op`, oldest first. */
    sentOps(op) {
      return this.sent.filter((f) => f.op === op);
    }
    ok(req, ok) {
      this.push({ re: req.id, ok });
    }
    err(req, code, msg = "") {
      this.push({ re: req.id, err: { code, msg } });
    }
    /** Answers a `room.join` with a snapshot at `(epoch, seq)`. */
    joined(req, epoch = 1, seq = 0) {
      this.ok(req, { epoch, seq, resync: false, snapshot: snapshot(req.d.room, epoch, seq) });
    }
  }
  const server = {
    sockets,
    FakeSocket,
    clients: [],
    /** A client of this server (backoff 5 to 20 ms unless given). */
    client(opts = {}) {
      const c = new Client({ url: "ws://fake/ws", token: "t", WebSocket: FakeSocket, reconnect: { initialMs: 5, maxMs: 20 }, ...opts });
      server.clients.push(c);
      return c;
    },
    /** The `n`th socket (0-based), once the client opened it. */
    socket: (n) => until(() => sockets[n], 5000, `socket ${n}`),
    /** Connects `c` through its next socket and answers its hello. */
    async connect(c) {
      const n = sockets.length;
      const open = c.connect();
      const s = await server.socket(n);
      s.hello();
      await open;
      return s;
    },
    /** Waits until `s` has sent `count` requests with `op`; resolves with them. */
    async sent(s, op, count) {
      await until(() => s.sentOps(op).length >= count, 5000, `${count} ${op} sent`);
      return s.sentOps(op);
    },
    closeAll() {
      for (const c of server.clients) c.close();
    },
  };
  return server;
}

export function snapshot(room, epoch = 1, seq = 0) {
  return {
    room,
    title: "",
    owner: "o",
    admins: [],
    locked: false,
    notice: "",
    cover: "",
    seat_mode: "free",
    host_seat: false,
    seats: [{ index: 0, user: null, locked: false, muted: false, admin_muted: false, publishing: false }],
    members: 1,
    epoch,
    seq,
  };
}
