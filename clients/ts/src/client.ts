import { Emitter, type ListenerError, reportError } from "./emitter.js";
import { ImInbox } from "./im.js";
import { type EventFrame, Room } from "./room.js";
import { Close, type ImMessage, type JoinOk, type OpName, type OpOk, type OpRequest, type RankBoard, type RankPeriod } from "./types.js";
import { ChorusError, backoff, keyed, uuidv7 } from "./util.js";

/** A token, or a function that fetches a fresh one (called at every connect and refresh). */
export type TokenSource = string | (() => string | Promise<string>);

/** The part of the WebSocket API the client uses (browsers' and the `ws` package's). */
export interface SocketLike {
  readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  on?: (event: string, fn: (...args: any[]) => void) => void;
  terminate?: () => void;
}
export type SocketFactory = new (url: string) => SocketLike;

export interface ClientOptions {
  /**
   * `ws://host:port/ws`, or several gateways: every failed attempt and every close moves the
   * client to the next one (protocol section 8, rule 4), a 1001 at once.
   */
  url: string | string[];
  token: TokenSource;
  /** How long a request waits for its reply (default 20 s: a room op may take 15 s to route). */
  requestTimeoutMs?: number;
  /** Reconnect backoff: first wait and cap (default 300 ms doubling to 10 s), with jitter. */
  reconnect?: { initialMs?: number; maxMs?: number };
  /**
   * The WebSocket class; default in Node the `ws` package when it can be imported (it shows the
   * HTTP answer to a refused upgrade: 401, 503 with `Retry-After`), else the global one.
   */
  WebSocket?: SocketFactory;
  /**
   * Acknowledged direct messages (section 13.7, default on): the connection asks for them
   * (`im_ack=1`), and the client acknowledges every `im` it hands to the application, so a
   * message is never lost with a dropped connection; duplicates are dropped by `id`.
   */
  imAck?: boolean;
  /** How long acknowledgements gather before one `im.ack` goes (default 200 ms). */
  imAckDelayMs?: number;
}

export type ConnectionState = "idle" | "connecting" | "open" | "reconnecting" | "closed";

export interface ClientEvents {
  /** The connection's state changed; `delayMs` is the wait before the next attempt. */
  state: { state: ConnectionState; reason?: string; delayMs?: number; attempt?: number };
  hello: { session: string; heartbeat_ms: number; server: string; im_ack?: boolean };
  /** A direct message (section 13), once per `id` even when the server sends it again. */
  im: ImMessage;
  /** `session.expiring` arrived; the client refreshes by itself when its token is a function. */
  "session.expiring": { exp: number };
  /** `auth.refresh` succeeded: the connection now lives until `exp`. */
  refreshed: { exp: number };
  /** Every event frame that belongs to no joined room (direct messages, once each; notices). */
  event: EventFrame;
  /**
   * A failure with no caller to report to: a refresh that failed, a refused reconnect, an
   * exception thrown by a listener of the client or of one of its rooms (a `ListenerError`,
   * the exception as its `cause`; without an `error` listener it goes to `console.error`).
   */
  error: Error;
}

interface Pending {
  op: string;
  resolve: (v: any) => void;
  reject: (e: Error) => void;
  timer: ReturnType<typeof setTimeout>;
}

/**
 * One `room.join` under way: its room, when it was asked for, and its place in the order the
 * joins went out (`seq`, infinite until it is sent: it goes after every join sent so far).
 */
interface JoinOut {
  room: Room;
  made: number;
  seq: number;
  /** The connection (`gen`) it was last sent on (-1: not sent yet). */
  sentOn: number;
  /** Whether it succeeded. */
  ok: boolean;
  /** Resolves once the join ended and its outcome was applied to the rooms. */
  done: Promise<void>;
}

/**
 * Operations with a `room` that need no membership: they are not held back while the room is
 * being rejoined (see {@link Client.send}).
 */
const NO_MEMBERSHIP = new Set<string>(["room.create", "room.join", "room.leave", "room.open", "rank.get", "guard.list"]);

/** Close codes after which reconnecting cannot help. */
const FINAL_CLOSES = new Set<number>([Close.TooManyConnections, Close.Suspended]);

/**
 * Most times a join whose reply timed out is sent again before it fails with `TIMEOUT`; a dead
 * connection ends it sooner (the heartbeat check drops it: `DISCONNECTED`).
 */
const MAX_JOIN_RESENDS = 3;

/**
 * A Chorus connection: typed requests with time-outs, typed events, one `Room` per joined
 * room, and the protocol's resume rules (section 8): it reconnects with backoff and jitter,
 * honours 1001 and 503 `Retry-After`, and rejoins every room with `since`.
 */
export class Client extends Emitter<ClientEvents> {
  state: ConnectionState = "idle";
  /** The server's `hello` of the current connection (null before the first and after `close()`). */
  session: ClientEvents["hello"] | null = null;
  readonly rooms = new Map<string, Room>();
  private readonly opts: Required<Omit<ClientOptions, "WebSocket" | "reconnect">> & {
    reconnect: { initialMs: number; maxMs: number };
  };
  private Socket: SocketFactory | undefined;
  private ws: SocketLike | null = null;
  /** Which socket is current; events of older sockets are ignored. */
  private gen = 0;
  private nextId = 1;
  private pending = new Map<number, Pending>();
  private attempt = 0;
  /**
   * When the current connection's `hello` came (0: none yet). The backoff starts over only
   * after a connection that lasted a heartbeat interval: a server that accepts and closes at
   * once (a flood close, a failing node behind a balancer) is not retried at the first step
   * each time.
   */
  private helloAt = 0;
  private urlIndex = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private refreshing = false;
  /** Direct messages seen (to drop duplicates) and not acknowledged yet. */
  private readonly im = new ImInbox();
  private ackTimer: ReturnType<typeof setTimeout> | null = null;
  /** When the current socket last delivered a frame (`Date.now()`). */
  private heardAt = 0;
  /** Whether the current socket showed a server ping (Node's `ws` does; browsers' do not). */
  private pingsHeard = false;
  /** Checks that the open socket still delivers (see {@link Client.checkAlive}). */
  private liveTimer: ReturnType<typeof setInterval> | null = null;
  /** The joins under way, and the numbers of the last join asked for and sent (section 4.3). */
  private readonly joinsOut = new Set<JoinOut>();
  private joinsMade = 0;
  private joinsSent = 0;

  constructor(opts: ClientOptions) {
    super();
    this.opts = {
      url: opts.url,
      token: opts.token,
      requestTimeoutMs: opts.requestTimeoutMs ?? 20_000,
      imAck: opts.imAck ?? true,
      imAckDelayMs: opts.imAckDelayMs ?? 200,
      reconnect: { initialMs: opts.reconnect?.initialMs ?? 300, maxMs: opts.reconnect?.maxMs ?? 10_000 },
    };
    this.Socket = opts.WebSocket;
  }

  /** Opens the connection; resolves at the server's `hello` (after retries, if needed). */
  async connect(): Promise<void> {
    if (this.state === "open") return;
    if (this.state === "idle" || this.state === "closed") void this.open();
    await this.waitOpen(Number.POSITIVE_INFINITY);
  }

  /** Resolves once the connection is open; rejects if the client closes or `timeoutMs` passes. */
  waitOpen(timeoutMs = this.opts.requestTimeoutMs): Promise<void> {
    if (this.state === "open") return Promise.resolve();
    if (this.state === "closed") return Promise.reject(new ChorusError("CLOSED", "the client is closed"));
    return new Promise((resolve, reject) => {
      const timer = Number.isFinite(timeoutMs)
        ? setTimeout(() => {
            off();
            reject(new ChorusError("TIMEOUT", `not connected within ${timeoutMs} ms`));
          }, timeoutMs)
        : undefined;
      const off = this.on("state", ({ state, reason }) => {
        if (state !== "open" && state !== "closed") return;
        clearTimeout(timer);
        off();
        if (state === "open") resolve();
        else reject(new ChorusError("CLOSED", reason ?? "the client is closed"));
      });
    });
  }

  /**
   * Sends one request and resolves with its `ok`, or rejects with a `ChorusError` (its `err`,
   * `TIMEOUT`, `DISCONNECTED`). Waits for the connection while it reconnects.
   */
  request<K extends OpName>(op: K, d: OpRequest<K>, opts: { timeoutMs?: number } = {}): Promise<OpOk<K>> {
    return this.send(op, d, opts.timeoutMs ?? this.opts.requestTimeoutMs);
  }

  /**
   * `request`, calling `onSend` just before the frame goes out. A request waits for the
   * connection, and a room's request (its `room` a room of this client, an operation that needs
   * membership) also for the room's rejoin while the connection may not be in the room (after a
   * reconnect, a `room.left` `unavailable`): it goes once the rejoin is answered, or fails with
   * what ended the room (the rejoin's error, `NOT_IN_ROOM`, `CLOSED`), unsent. `cancel` says,
   * just before the frame would go, that it must not: the request resolves with null, unsent.
   */
  private async send<K extends OpName>(op: K, d: OpRequest<K>, timeoutMs: number, onSend?: () => void): Promise<OpOk<K>>;
  private async send<K extends OpName>(
    op: K,
    d: OpRequest<K>,
    timeoutMs: number,
    onSend: (() => void) | undefined,
    cancel: () => boolean,
  ): Promise<OpOk<K> | null>;
  private async send<K extends OpName>(
    op: K,
    d: OpRequest<K>,
    timeoutMs: number,
    onSend?: () => void,
    cancel?: () => boolean,
  ): Promise<OpOk<K> | null> {
    const started = Date.now();
    const left = () => Math.max(1, timeoutMs - (Date.now() - started));
    for (;;) {
      if (this.state !== "open") await this.waitOpen(left());
      const room = this.heldBy(op, d);
      if (!room) break;
      await room.ready(op, left());
    }
    if (cancel?.()) return null;
    const ws = this.ws;
    if (!ws) throw new ChorusError("DISCONNECTED", "not connected", op);
    const id = this.nextId++;
    return new Promise<OpOk<K>>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new ChorusError("TIMEOUT", `no reply within ${timeoutMs} ms`, op));
      }, left());
      this.pending.set(id, { op, resolve, reject, timer });
      try {
        onSend?.();
        ws.send(JSON.stringify({ id, op, d }));
      } catch (e) {
        clearTimeout(timer);
        this.pending.delete(id);
        reject(new ChorusError("DISCONNECTED", String(e), op));
      }
    });
  }

  /** The room whose rejoin a request `op` with `d` waits for now (see {@link Client.send}), if any. */
  private heldBy(op: string, d: unknown): Room | null {
    if (NO_MEMBERSHIP.has(op)) return null;
    const id = (d as { room?: unknown } | null)?.room;
    const r = typeof id === "string" ? this.rooms.get(id) : undefined;
    return r?.away ? r : null;
  }

  /**
   * Joins a room and returns it; its events and resume are handled from then on. A connection
   * is in one room at a time (section 4.3): a successful join moves it out of the room it was
   * in, which then ends with `left` reason `switched`. Joins made without waiting for each
   * other end in the room of the last one, whatever order the replies come back in: a room
   * only passed through (A → B → A) is returned ended (`left`, `switched`), and a join of the
   * room the connection is in, or is joining, while a join of another room goes after it
   * joins it again. Otherwise a join of a room joined, or being joined, already returns it
   * (once that join ended).
   */
  async join(room: string, opts: { password?: string } = {}): Promise<Room> {
    const existing = this.rooms.get(room);
    if (existing && existing.state !== "left") {
      if (this.movingOn(existing)) await existing.join();
      else await existing.firstJoin;
      return existing;
    }
    const r = new Room(this, room, opts.password);
    this.rooms.set(room, r);
    r.firstJoin = r.join();
    await r.firstJoin;
    return r;
  }

  /**
   * @internal Sends `room.join` for `room`, in the order of the joins (section 4.3): the
   * connection ends in the room of the last join sent that succeeded, so a reply is applied
   * only if no later join took the connection elsewhere, and it ends every room joined before.
   * Resolves with the reply to apply, or null: the room ended meanwhile (moved out of by a
   * later join, left), or a later join of the room was applied already. A join not sent yet
   * when its room is left is not sent (null).
   */
  async joinRoom(room: Room, d: OpRequest<"room.join">): Promise<JoinOk | null> {
    let settled!: () => void;
    const out: JoinOut = {
      room,
      made: ++this.joinsMade,
      seq: Number.POSITIVE_INFINITY,
      sentOn: -1,
      ok: false,
      done: new Promise<void>((r) => (settled = r)),
    };
    this.joinsOut.add(out);
    try {
      let ok: JoinOk;
      for (let resends = 0; ; resends++) {
        let sentOn = -1;
        try {
          const reply = await this.send(
            "room.join",
            d,
            this.opts.requestTimeoutMs,
            () => {
              out.seq = ++this.joinsSent;
              out.sentOn = sentOn = this.gen;
            },
            () => room.state === "left" || room.leaving,
          );
          if (!reply) {
            this.joinsOut.delete(out);
            return null;
          }
          ok = reply;
          break;
        } catch (e) {
          // A join whose reply timed out may still be applied (and a join that moved the
          // connection out of its room says so only in its reply): its outcome is unknown.
          // While it is the last join sent on this connection it goes again, and that reply
          // settles it: a join of the room the connection is in is answered like any other.
          const unknown = e instanceof ChorusError && e.code === "TIMEOUT" && sentOn === this.gen;
          const last = out.seq === this.joinsSent && this.state === "open" && room.state !== "left";
          if (!unknown || !last || resends >= MAX_JOIN_RESENDS) throw e;
        }
      }
      this.joinsOut.delete(out);
      out.ok = true;
      if (room.state === "left" || room.leaving) {
        // Left while its join went: the join still moved the connection out of the rooms
        // joined before it (the leave that follows takes it out of this one).
        this.switchOut(out.seq);
        return null;
      }
      const fresh = out.seq > room.joinedAt;
      room.joinedAt = Math.max(room.joinedAt, out.seq);
      // This join may end other rooms, or this one when a later join succeeded already.
      this.switchOut();
      return fresh && this.rooms.get(room.id) === room ? ok : null;
    } catch (e) {
      // A failed join changes nothing (section 4.3); a room never joined is dropped silently.
      this.joinsOut.delete(out);
      if (room.joinedAt === 0 && !this.joinsOf(room).length) this.forget(room);
      this.switchOut();
      throw e;
    } finally {
      settled();
    }
  }

  /** @internal Resolves once no join of a room other than `room` is under way. */
  async othersJoined(room: Room): Promise<void> {
    for (;;) {
      const others = [...this.joinsOut].filter((j) => j.room !== room);
      if (!others.length) return;
      await Promise.all(others.map((j) => j.done));
    }
  }

  /**
   * @internal Leaves `room` (`Room.leave`, which let go of it already): at once when the
   * connection is in the room and no join of it is under way; after the joins of it sent on
   * this connection otherwise, when one of them put the connection back in (and no later join
   * of the room was asked for since: that one wins). A room the connection is not in, with no
   * join of it sent (the connection dropped, its rejoin not sent yet), ends with nothing sent.
   * Either way it ends (`left`), at once unless the leave goes at once. Resolves once the
   * connection is out: a `NOT_IN_ROOM`, a lost connection or a closed client say so too.
   */
  async leaveRoom(room: Room): Promise<void> {
    const member = room.state === "joined" || (room.state === "rejoining" && !room.away);
    const sent = this.joinsOf(room).filter((j) => j.sentOn === this.gen && this.state === "open");
    const out = async () => {
      try {
        await this.request("room.leave", { room: room.id });
      } catch (e) {
        const gone = e instanceof ChorusError && (e.code === "NOT_IN_ROOM" || e.code === "DISCONNECTED" || e.code === "CLOSED");
        if (!gone) throw e;
      }
    };
    if (member && !sent.length) {
      try {
        await out();
      } finally {
        room.finish("left");
      }
      return;
    }
    room.finish("left");
    if (!sent.length) return;
    const gen = this.gen;
    await Promise.all(sent.map((j) => j.done));
    if (gen !== this.gen || !(member || sent.some((j) => j.ok)) || this.rooms.has(room.id)) return;
    await out();
  }

  private joinsOf(room: Room): JoinOut[] {
    return [...this.joinsOut].filter((j) => j.room === room);
  }

  /** Whether a join of another room than `room` goes after the last join of `room`. */
  private movingOn(room: Room): boolean {
    const own = this.joinsOf(room).reduce<JoinOut | null>((a, j) => (a && a.made > j.made ? a : j), null);
    return [...this.joinsOut].some(
      (j) => j.room !== room && (own ? j.seq > own.seq || (j.seq === own.seq && j.made > own.made) : j.seq > room.joinedAt),
    );
  }

  /**
   * Ends (`switched`) every room the connection was moved out of: the room whose join was sent
   * last of those that succeeded holds the connection; a room joined before it, or only being
   * joined before it, is out, unless a join of it sent later (or still to be sent) is under way.
   */
  private switchOut(floor = 0): void {
    let top: Room | null = null;
    for (const r of this.rooms.values()) if (r.state !== "left" && r.joinedAt > (top?.joinedAt ?? 0)) top = r;
    // `floor`: a join that succeeded for a room left meanwhile (no longer among the rooms).
    const at = Math.max(top?.joinedAt ?? 0, floor);
    if (at === 0) return;
    for (const r of [...this.rooms.values()]) {
      if ((r === top && r.joinedAt >= at) || r.state === "left" || this.joinsOf(r).some((j) => j.seq > at)) continue;
      r.onLeft("switched");
    }
  }

  // ---- gateway-answered operations ----

  ping(): Promise<OpOk<"ping">> {
    return this.request("ping", {});
  }
  createRoom(d: OpRequest<"room.create"> = {}): Promise<OpOk<"room.create">> {
    return this.request("room.create", d);
  }
  gifts(): Promise<OpOk<"gift.list">> {
    return this.request("gift.list", {});
  }
  balance(): Promise<OpOk<"wallet.balance">> {
    return this.request("wallet.balance", {});
  }
  /** One page of the caller's statement, newest first (section 6.5). */
  walletHistory(d: OpRequest<"wallet.history"> = {}): Promise<OpOk<"wallet.history">> {
    return this.request("wallet.history", d);
  }
  /**
   * `wallet.transfer` (a seller's): idempotent by `reqId` (a UUIDv7 unless given), like a gift;
   * a rejection carries it as `e.reqId`, to send the transfer again with when its outcome is
   * unknown (`e.retryable`, `CLOSED`).
   */
  transferCoins(to: string, amount: number, reqId: string = uuidv7()): Promise<OpOk<"wallet.transfer">> {
    return keyed(this.request("wallet.transfer", { to, amount, req_id: reqId }), reqId);
  }
  checkin(): Promise<OpOk<"wallet.checkin">> {
    return this.request("wallet.checkin", {});
  }
  /** The room directory (`room.list`): one page of live rooms. */
  listRooms(d: OpRequest<"room.list"> = {}): Promise<OpOk<"room.list">> {
    return this.request("room.list", d);
  }
  /** `room.open`: the owner reopens a closed room (no membership needed). */
  openRoom(room: string): Promise<OpOk<"room.open">> {
    return this.request("room.open", { room });
  }
  follow(user: string): Promise<OpOk<"follow.add">> {
    return this.request("follow.add", { user });
  }
  unfollow(user: string): Promise<OpOk<"follow.remove">> {
    return this.request("follow.remove", { user });
  }
  followCounts(user?: string): Promise<OpOk<"follow.counts">> {
    return this.request("follow.counts", user === undefined ? {} : { user });
  }
  follows(d: OpRequest<"follow.list">): Promise<OpOk<"follow.list">> {
    return this.request("follow.list", d);
  }
  /** The rooms the users one follows are in now. */
  followedRooms(limit?: number): Promise<OpOk<"follow.rooms">> {
    return this.request("follow.rooms", limit === undefined ? {} : { limit });
  }
  /** An app-wide leaderboard (`rank.get` with `scope: "app"`): every room's gifts, no room needed. */
  appRanks(board: RankBoard, period: RankPeriod = "all", limit?: number): Promise<OpOk<"rank.get">> {
    return this.request("rank.get", { scope: "app", board, period, ...(limit ? { limit } : {}) });
  }
  /** The guard plans on sale (section 16.4). */
  guardPlans(): Promise<OpOk<"guard.plans">> {
    return this.request("guard.plans", {});
  }
  /** Becomes a guard of `host` for one plan's duration; a retry with the same `reqId` is paid once. */
  buyGuard(host: string, plan: string, reqId: string): Promise<OpOk<"guard.buy">> {
    return keyed(this.request("guard.buy", { host, plan, req_id: reqId }), reqId);
  }
  /** The guards in force of a host, named directly or as a room's owner. */
  guards(of: OpRequest<"guard.list">): Promise<OpOk<"guard.list">> {
    return this.request("guard.list", of);
  }
  updateProfile(p: OpRequest<"user.update">): Promise<OpOk<"user.update">> {
    return this.request("user.update", p);
  }
  profiles(users: string[]): Promise<OpOk<"user.get">> {
    return this.request("user.get", { users });
  }
  /**
   * Acknowledges the direct messages handed to the application so far now, instead of after
   * `imAckDelayMs`; resolves when the server answered (a failed batch is sent again on the next
   * connection). `close()` sends them too, without waiting.
   */
  ackIms(): Promise<void> {
    if (this.ackTimer) clearTimeout(this.ackTimer);
    this.ackTimer = null;
    return this.flushAcks();
  }
  /**
   * Sends a direct message; a retry with the same `reqId` (a UUIDv7 unless given) is the same
   * message (section 13.1). A rejection carries it as `e.reqId`.
   */
  sendIm(to: string, text: string, reqId: string = uuidv7()): Promise<OpOk<"im.send">> {
    return keyed(this.request("im.send", { to, text, req_id: reqId }), reqId);
  }
  /**
   * Sends a typed direct message (section 13.1): an app-defined `type` (a room invitation, a
   * picture) with its JSON `data` (2 KiB at most), and the `text` a client that does not know
   * the type shows. Idempotent by `reqId` as `sendIm`; a retry must repeat type and data.
   */
  sendTypedIm(to: string, type: string, data: unknown, text: string, reqId: string = uuidv7()): Promise<OpOk<"im.send">> {
    return keyed(this.request("im.send", { to, text, req_id: reqId, type, data }), reqId);
  }
  /** One page of the caller's direct messages, newest first (section 13.2). */
  imHistory(d: OpRequest<"im.history"> = {}): Promise<OpOk<"im.history">> {
    return this.request("im.history", d);
  }
  /** Refuses direct messages from `user` (section 13). */
  blockIm(user: string): Promise<OpOk<"im.block">> {
    return this.request("im.block", { user });
  }
  unblockIm(user: string): Promise<OpOk<"im.unblock">> {
    return this.request("im.unblock", { user });
  }
  imBlocks(): Promise<OpOk<"im.blocks">> {
    return this.request("im.blocks", {});
  }

  /**
   * Closes the connection for good: no reconnect, pending requests fail with `CLOSED`, and
   * every room ends (`left` with the client-side reason `client_closed`): after `connect()`,
   * `join` joins afresh.
   */
  close(): void {
    this.gen++;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.ackTimer) clearTimeout(this.ackTimer);
    this.ackTimer = null;
    if (this.liveTimer) clearInterval(this.liveTimer);
    this.liveTimer = null;
    const ws = this.ws;
    this.ws = null;
    try {
      // Acknowledgements still gathering go before the close (no reply is awaited).
      while (ws && this.state === "open" && this.session?.im_ack && this.im.owing) {
        ws.send(JSON.stringify({ id: this.nextId++, op: "im.ack", d: { ids: this.im.batch() } }));
      }
      ws?.close(1000, "bye");
    } catch {
      /* already closed */
    }
    this.failPending("CLOSED", "the client is closed");
    this.endRooms();
    // A later connect() is a new start ("connecting", the first backoff step), not a reconnect.
    this.session = null;
    this.attempt = 0;
    this.helloAt = 0;
    this.setState("closed", "closed by the client");
  }

  /** Ends every room (`left`, `client_closed`): a closed client rejoins none (a later `join` joins afresh). */
  private endRooms(): void {
    for (const r of [...this.rooms.values()]) r.onLeft("client_closed");
  }

  /** Drops the socket as a network failure would (the client reconnects and resumes). */
  dropConnection(): void {
    const ws = this.ws;
    if (!ws) return;
    if (ws.terminate) ws.terminate();
    else ws.close(4999, "dropped by the client");
  }

  /**
   * @internal A listener of the client or of one of its rooms threw: the `error` event when the
   * application listens to it (and the listener that threw was not one of `error`), else the
   * console.
   */
  override listenerFailed(e: ListenerError): void {
    if (e.event !== "error" && this.listening("error")) this.emit("error", e);
    else reportError(e);
  }

  /** @internal */
  forget(room: Room): void {
    if (this.rooms.get(room.id) === room) this.rooms.delete(room.id);
  }

  // ---- the connection ----

  private async socketClass(): Promise<SocketFactory> {
    if (this.Socket) return this.Socket;
    const g = (globalThis as { WebSocket?: SocketFactory }).WebSocket;
    // In Node the `ws` package comes first: Node's global WebSocket (22 and later) hides the
    // HTTP answer to a refused upgrade, as browsers do, so a refused token would look like a
    // node that is down (reconnecting for ever) and a 503's Retry-After would go unseen.
    const inNode = (globalThis as { process?: { versions?: { node?: string } } }).process?.versions?.node !== undefined;
    if (inNode || !g) {
      try {
        const mod = "ws";
        const ws = (await import(/* @vite-ignore */ mod)) as { default: SocketFactory };
        return (this.Socket = ws.default);
      } catch (e) {
        if (!g) throw e;
      }
    }
    return (this.Socket = g!);
  }

  private async token(): Promise<string> {
    const t = this.opts.token;
    return typeof t === "function" ? await t() : t;
  }

  private url(): string {
    const u = this.opts.url;
    return Array.isArray(u) ? u[this.urlIndex % u.length]! : u;
  }

  private async open(): Promise<void> {
    const gen = ++this.gen;
    this.setState(this.attempt === 0 && this.session === null ? "connecting" : "reconnecting");
    let Socket: SocketFactory;
    let token: string;
    try {
      Socket = await this.socketClass();
      token = await this.token();
    } catch (e) {
      if (gen !== this.gen) return;
      this.emit("error", e instanceof Error ? e : new Error(String(e)));
      this.retry(gen, { reason: `no token: ${String(e)}` });
      return;
    }
    if (gen !== this.gen) return;
    const base = this.url();
    const ack = this.opts.imAck ? "&im_ack=1" : "";
    const url = `${base}${base.includes("?") ? "&" : "?"}token=${encodeURIComponent(token)}${ack}`;
    let ws: SocketLike;
    try {
      ws = new Socket(url);
    } catch (e) {
      this.urlIndex++;
      this.retry(gen, { reason: String(e) });
      return;
    }
    this.ws = ws;
    let refusal: { status: number; retryAfterS?: number } | null = null;
    // Node's `ws` shows the HTTP answer to a refused upgrade (401, 503 with Retry-After);
    // browsers hide it, and their refusal looks like any failed connect.
    ws.on?.("unexpected-response", (req: { destroy(): void }, res: { statusCode: number; headers: Record<string, string | undefined>; resume(): void }) => {
      const ra = Number(res.headers["retry-after"]);
      refusal = { status: res.statusCode, ...(Number.isFinite(ra) && ra >= 0 ? { retryAfterS: ra } : {}) };
      res.resume();
      req.destroy();
      if (gen !== this.gen) return;
      this.onSocketGone(gen, 1006, `HTTP ${res.statusCode}`, refusal);
    });
    // Node's `ws` shows the server's pings (section 2: one per heartbeat interval), which
    // browsers answer unseen: a ping heard shows the socket delivers as well as a frame does,
    // so a quiet connection needs no `ping` request of its own (see `watchAlive`).
    this.pingsHeard = false;
    ws.on?.("ping", () => {
      if (gen !== this.gen) return;
      this.heardAt = Date.now();
      this.pingsHeard = true;
    });
    ws.onmessage = (m) => {
      if (gen !== this.gen) return;
      this.heardAt = Date.now();
      this.onFrame(String(m.data));
    };
    ws.onclose = (c) => {
      if (gen === this.gen) this.onSocketGone(gen, c.code, c.reason, refusal);
    };
    ws.onerror = () => {
      /* the close that follows carries what is known */
    };
  }

  private onFrame(text: string): void {
    let f: any;
    try {
      f = JSON.parse(text);
    } catch {
      return;
    }
    if (f === null || typeof f !== "object") return;
    if ("re" in f) {
      if (typeof f.re !== "number") return; // a BAD_FRAME with no id: nothing to answer
      const p = this.pending.get(f.re);
      if (!p) return;
      this.pending.delete(f.re);
      clearTimeout(p.timer);
      if (f.err) p.reject(new ChorusError(String(f.err.code), String(f.err.msg ?? ""), p.op));
      else p.resolve(f.ok ?? {});
      return;
    }
    if (typeof f.ev !== "string") return;
    const frame = f as EventFrame;
    switch (frame.ev) {
      case "hello":
        this.session = frame.d as ClientEvents["hello"];
        this.helloAt = Date.now();
        this.watchAlive(this.gen, this.session.heartbeat_ms);
        this.setState("open");
        this.emit("hello", this.session);
        // Acknowledgements a dropped connection could not send go on this one.
        if (this.im.owing) this.scheduleAck();
        // Rule 4: after a reconnect every room rejoins with `since`.
        // (A room whose join the application made again is resumed by that join.)
        for (const r of this.rooms.values()) if (r.state === "rejoining" && !this.joinsOf(r).length) r.rejoin("reconnected");
        return;
      case "room.left": {
        const d = (frame.d ?? {}) as { room?: string; reason?: string };
        const r = d.room ? this.rooms.get(d.room) : undefined;
        if (r) r.onLeft(d.reason ?? "unavailable");
        else this.emit("event", frame);
        return;
      }
      case "im": {
        const d = frame.d as ImMessage | undefined;
        if (typeof d?.id === "number") {
          const fresh = this.im.take(d.id);
          // Acknowledged again when sent again: the first acknowledgement may have been lost.
          if (this.session?.im_ack) {
            this.im.owe(d.id);
            this.scheduleAck();
          }
          if (!fresh) return;
          this.emit("im", d);
        }
        this.emit("event", frame);
        return;
      }
      case "session.expiring": {
        const d = frame.d as { exp: number };
        this.emit("session.expiring", d);
        void this.refresh();
        return;
      }
    }
    const r = frame.room ? this.rooms.get(frame.room) : undefined;
    if (r) r.onEvent(frame);
    else this.emit("event", frame);
  }

  /** Sends the gathered acknowledgements after `imAckDelayMs` (one timer at a time). */
  private scheduleAck(): void {
    if (this.ackTimer) return;
    this.ackTimer = setTimeout(() => {
      this.ackTimer = null;
      void this.flushAcks();
    }, this.opts.imAckDelayMs);
  }

  /** `im.ack` for every gathered id, 200 a request; a batch that fails waits for the next connection. */
  private flushAcks(): Promise<void> {
    if (this.state !== "open" || !this.session?.im_ack) return Promise.resolve();
    const sent: Promise<void>[] = [];
    while (this.im.owing) {
      const ids = this.im.batch();
      sent.push(
        this.request("im.ack", { ids }).then(
          () => undefined,
          (e: unknown) => {
            if (e instanceof ChorusError && e.retryable) this.im.giveBack(ids);
          },
        ),
      );
    }
    return Promise.all(sent).then(() => undefined);
  }

  /** `auth.refresh` with a fresh token from the provider (section 14.2). */
  private async refresh(): Promise<void> {
    if (typeof this.opts.token !== "function" || this.refreshing) return;
    this.refreshing = true;
    try {
      const token = await this.token();
      const ok = await this.request("auth.refresh", { token });
      this.emit("refreshed", ok);
    } catch (e) {
      this.emit("error", e instanceof Error ? e : new Error(String(e)));
    } finally {
      this.refreshing = false;
    }
  }

  /**
   * A socket can die without a close (a network that drops everything, a sleeping laptop): the
   * server's pings do not reach the page (browsers answer them unseen), so after a heartbeat
   * interval without a frame the client asks `ping`, and a socket that delivers nothing, not
   * even the answer, within another interval is given up as lost (protocol section 8, rule 4):
   * reconnect and resume. Frames that keep coming make the `ping` needless, and so do the
   * server's pings where the socket shows them (Node's `ws`).
   */
  private watchAlive(gen: number, heartbeatMs: number): void {
    if (this.liveTimer) clearInterval(this.liveTimer);
    const every = Math.max(100, heartbeatMs);
    this.heardAt = Date.now();
    this.liveTimer = setInterval(() => this.checkAlive(gen, every), every);
    // In Node, the check alone does not keep a process alive.
    (this.liveTimer as { unref?: () => void }).unref?.();
  }

  private checkAlive(gen: number, every: number): void {
    // The server's pings come an interval apart, each maybe a little late (the node pings its
    // sockets from ticks an eighth of an interval apart): where they are seen, one is quiet
    // only an eighth of an interval after it was due.
    const quiet = this.pingsHeard ? every + Math.ceil(every / 8) : every;
    if (gen !== this.gen || this.state !== "open" || Date.now() - this.heardAt < quiet) return;
    const asked = Date.now();
    this.request("ping", {}, { timeoutMs: every }).catch((e) => {
      if (gen !== this.gen || !(e instanceof ChorusError) || e.code !== "TIMEOUT") return;
      // Frames that came meanwhile show the socket delivers: the answer waits behind them.
      if (this.heardAt >= asked) return;
      const ws = this.ws;
      this.onSocketGone(gen, 4998, "no answer within a heartbeat", null);
      try {
        if (ws?.terminate) ws.terminate();
        else ws?.close(4998, "no answer");
      } catch {
        /* already gone */
      }
    });
  }

  private onSocketGone(stale: number, code: number, reason: string, refusal: { status: number; retryAfterS?: number } | null): void {
    if (stale !== this.gen) return;
    if (this.liveTimer) clearInterval(this.liveTimer);
    this.liveTimer = null;
    // A socket is gone once: its later events (a close after a refused upgrade) are stale.
    const gen = ++this.gen;
    this.ws = null;
    this.failPending("DISCONNECTED", `connection closed (${code}${reason ? " " + reason : ""})`);
    if (FINAL_CLOSES.has(code)) {
      this.gen++;
      this.endRooms();
      this.setState("closed", `closed ${code}: ${reason}`);
      return;
    }
    // A static token that was refused, or expired under a connection (1008 `token expired`;
    // browsers do not show the upgrade's 401 at all, so this is their only sign), would only be
    // refused again: stop, and let the app connect with a new one.
    const expired = code === 1008 && reason === "token expired";
    if ((refusal?.status === 401 || expired) && typeof this.opts.token !== "function") {
      this.gen++;
      this.endRooms();
      this.emit("error", new ChorusError("UNAUTHORIZED", "the token was refused and cannot be renewed"));
      this.setState("closed", expired ? "token expired (1008)" : "token refused (401)");
      return;
    }
    for (const r of this.rooms.values()) r.onDisconnected();
    // Rule 4: with several gateways the next attempt goes to the next one, whatever ended this
    // one (a refused or failed connect, a drop, a drain).
    this.urlIndex++;
    if (code === Close.GoingAway) {
      // The node drains: go to the next gateway at once, spread by jitter.
      this.retry(gen, { reason: `going away (1001)`, delayMs: Math.round(Math.random() * this.opts.reconnect.initialMs) });
      return;
    }
    if (refusal?.status === 503 && refusal.retryAfterS !== undefined) {
      this.retry(gen, { reason: "503 admission", delayMs: refusal.retryAfterS * 1000 + Math.round(Math.random() * 1000) });
      return;
    }
    this.retry(gen, { reason: refusal ? `HTTP ${refusal.status}` : `closed ${code}${reason ? ": " + reason : ""}` });
  }

  private retry(gen: number, how: { reason: string; delayMs?: number }): void {
    if (gen !== this.gen) return;
    // A connection that lasted a heartbeat interval was a success: the backoff starts over.
    if (this.helloAt !== 0 && Date.now() - this.helloAt >= (this.session?.heartbeat_ms ?? 0)) this.attempt = 0;
    this.helloAt = 0;
    const delayMs = how.delayMs ?? backoff(this.attempt, this.opts.reconnect.initialMs, this.opts.reconnect.maxMs);
    this.attempt++;
    this.setState("reconnecting", how.reason, delayMs);
    this.timer = setTimeout(() => {
      this.timer = null;
      if (gen === this.gen) void this.open();
    }, delayMs);
  }

  private failPending(code: string, msg: string): void {
    const all = [...this.pending.values()];
    this.pending.clear();
    for (const p of all) {
      clearTimeout(p.timer);
      p.reject(new ChorusError(code, msg, p.op));
    }
  }

  private setState(state: ConnectionState, reason?: string, delayMs?: number): void {
    const changed = this.state !== state;
    this.state = state;
    if (changed || delayMs !== undefined) {
      this.emit("state", {
        state,
        ...(reason ? { reason } : {}),
        ...(delayMs !== undefined ? { delayMs, attempt: this.attempt } : {}),
      });
    }
  }
}
