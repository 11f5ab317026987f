import { Emitter, type ListenerError } from "./emitter.js";
import type { Client } from "./client.js";
import {
  type JoinOk,
  type Member,
  type OpOk,
  type OpRequest,
  type PkVs,
  type Position,
  type RankBoard,
  type RankPeriod,
  type RoomEvent,
  type SequencedEvents,
  type Snapshot,
  type VolatileEvents,
} from "./types.js";
import { ChorusError, backoff, notSent, sleep, uuidv7 } from "./util.js";

/** What a room emits: its protocol events, plus the client's view of the room's life. */
export type RoomEvents = { [K in keyof SequencedEvents]: RoomEvent<SequencedEvents[K]> } & {
  [K in keyof VolatileEvents]: RoomEvent<VolatileEvents[K]>;
} & {
  /** The room's state was replaced from a snapshot (the first join, and every rejoin's reply). */
  snapshot: Snapshot;
  /** A rejoin started (after a gap, `room.left` `unavailable` or a reconnect). */
  rejoining: { reason: string };
  /** A rejoin succeeded; `resync` true means missed events were not replayed. */
  resumed: { resync: boolean };
  /**
   * The client is no longer in the room: a `room.left` reason (section 7.3), or the client's
   * own: `left` (`leave()`, also while the room is being rejoined), `client_closed`
   * (`Client.close()`), the error code of a refused rejoin, `unavailable` after the rejoin
   * attempts ran out.
   */
  left: { reason: string };
};

export type RoomState = "joining" | "joined" | "rejoining" | "left";

/** A raw event frame (section 3.3). */
export interface EventFrame {
  ev: string;
  room?: string;
  epoch?: number;
  seq?: number;
  d?: Record<string, unknown>;
}

/** Most rejoin attempts after `UNAVAILABLE` before the room is given up (`left`). */
const MAX_REJOIN_ATTEMPTS = 30;

/**
 * One joined room: its snapshot kept current from the events, the resume position
 * `(epoch, seq)` of section 8, and typed helpers for the room operations.
 */
export class Room extends Emitter<RoomEvents> {
  readonly id: string;
  state: RoomState = "joining";
  /**
   * The room as last known: the join snapshot with every applied event folded in; its `epoch`
   * and `seq` are those of `position`.
   */
  snapshot: Snapshot | null = null;
  /** The last applied sequenced event (section 8, rule 1); null before the first join reply. */
  position: Position | null = null;
  private readonly client: Client;
  private readonly password: string | undefined;
  /** Events that arrived before the first join reply. */
  private early: EventFrame[] = [];
  /** Increases with every rejoin started; a rejoin loop whose number is stale stops. */
  private rejoinGen = 0;
  /** @internal The place in the order of the joins of this room's last successful join (0: none yet). */
  joinedAt = 0;
  /**
   * @internal The connection may not be in the room now (it dropped, the room stopped, a join
   * of another room may have moved it): the room's requests wait for its rejoin. Not during the
   * rejoin after a gap, which happens in the room.
   */
  away = false;
  /** @internal `leave()` was called: no join or rejoin of this room goes any more. */
  leaving = false;
  /** The promise of `leave()`, once called. */
  private leaveDone: Promise<void> | null = null;
  /** Requests waiting for the rejoin (see {@link Room.ready}). */
  private readonly waiters = new Set<{ resolve: () => void; fail: (reason: string, err: ChorusError | null) => void }>();

  /** @internal Made by `Client.join`. */
  constructor(client: Client, id: string, password?: string) {
    super();
    this.client = client;
    this.id = id;
    this.password = password;
  }

  // ---- room operations: one typed helper per op ----

  /**
   * Sends a chat line; `mentions` names members of the room it mentions (at most 10),
   * `replyTo` the seq of a line it answers (one of the room's last 64 of this epoch), and
   * `mentionAll` makes it mention everyone in the room ("@all"; the owner or an admin only,
   * a member is refused `FORBIDDEN`).
   */
  chat(
    text: string,
    opts: { mentions?: string[]; replyTo?: number; mentionAll?: boolean } = {},
  ): Promise<OpOk<"chat.send">> {
    const d: OpRequest<"chat.send"> = { room: this.id, text };
    if (opts.mentions?.length) d.mentions = opts.mentions;
    if (opts.replyTo !== undefined) d.reply_to = opts.replyTo;
    if (opts.mentionAll) d.mention_all = true;
    return this.client.request("chat.send", d);
  }
  /**
   * Takes back the chat line at `seq` (its `chat.send` answer): one's own within 2 minutes, or
   * (owner or admin) a line of someone below. Everyone gets `chat.recall` naming it.
   */
  recallChat(seq: number): Promise<OpOk<"chat.recall">> {
    return this.client.request("chat.recall", { room: this.id, seq });
  }
  /**
   * Pins the chat line at `seq` above the chat for everyone, newcomers included (owner or
   * admin), or takes the pinned line down (`null`). Everyone gets `chat.pin`; the snapshot's
   * `pinned` follows it.
   */
  pinChat(seq: number | null): Promise<OpOk<"chat.pin">> {
    return this.client.request("chat.pin", { room: this.id, seq });
  }
  /**
   * Sends an app-defined message (`type`, and any JSON `data` up to 2 KiB) to everyone in the
   * room. With `volatile` it goes only to those in the room now, without a seq, and is never
   * replayed: for likes and other bursts worth nothing a second later.
   */
  sendCustom(type: string, data?: unknown, options: { volatile?: boolean } = {}): Promise<OpOk<"custom.send">> {
    const d: OpRequest<"custom.send"> = { room: this.id, type };
    if (data !== undefined) d.data = data;
    if (options.volatile) d.volatile = true;
    return this.client.request("custom.send", d);
  }
  /**
   * Likes the room (`count` taps at once, 1..=100; section 5.39): answers the room's total.
   * Everyone gets what was added as one `room.likes` at most once a second, and the
   * snapshot's `likes` follows it.
   */
  like(count = 1): Promise<OpOk<"like.send">> {
    return this.client.request("like.send", count === 1 ? { room: this.id } : { room: this.id, count });
  }
  /**
   * Reports a user, a chat line (`seq`, its `chat` event's; its sender is the user reported)
   * or, with neither, the room to the app's moderators. `reason` is the app's code (e.g.
   * `"spam"`), `text` the reporter's words. Nobody in the room sees it; it waits in the
   * app's moderation queue, and the answer is its id there (`{id}`). The same report again
   * within 10 minutes answers `{duplicate: true}`, and more than 5 in 10 minutes answer
   * `RATE_LIMITED`.
   */
  report(reason: string, about: { user?: string; seq?: number; text?: string } = {}): Promise<OpOk<"report.send">> {
    return this.client.request("report.send", { room: this.id, reason, ...about });
  }
  /**
   * Starts a PK (owner or admin, section 16.5): a gift battle of `seconds` (30..=3600, 300 by
   * default) between two teams of seats; without teams, the seats other than the host seat
   * split in two halves. `PK_ON` while one is on.
   */
  startPk(opts: { seconds?: number; red?: number[]; blue?: number[] } = {}): Promise<OpOk<"pk.start">> {
    return this.client.request("pk.start", { room: this.id, ...opts });
  }
  /**
   * Ends the PK that is on before its time (owner or admin); `NO_PK` when none is. In a PK
   * between two rooms (section 16.6) it ends the PK in both rooms: the answer comes at once
   * and `pk.end` follows a second or two later, once the rooms have exchanged their final
   * scores (`NO_PK` meanwhile).
   */
  stopPk(): Promise<OpOk<"pk.stop">> {
    return this.client.request("pk.stop", { room: this.id });
  }
  /**
   * Invites room `vs` to a PK between the two rooms (owner or admin, in this room; section
   * 16.6) of `seconds` (30..=3600, 300 by default). The staff of `vs` who are in it get
   * `pk.invite`; they have 30 s to accept (the PK starts in both rooms: `pk.start` with `vs`)
   * or decline (this room's staff get `pk.declined`). The answer's `link` is the match's id. A
   * new invitation from this room replaces its pending one. `PK_ON` while either room has a
   * PK on; `ROOM_NOT_FOUND` when `vs` does not exist.
   */
  invitePk(vs: string, opts: { seconds?: number } = {}): Promise<OpOk<"pk.invite">> {
    const d: OpRequest<"pk.invite"> = { room: this.id, vs };
    if (opts.seconds !== undefined) d.seconds = opts.seconds;
    return this.client.request("pk.invite", d);
  }
  /**
   * Accepts another room's invitation to a PK (owner or admin, in this room; section 16.6),
   * its `pk.invite` event's `link`: the PK starts in both rooms at once. `NO_SUCH_REQUEST`
   * when it is unknown or already answered, `REQUEST_EXPIRED` after its 30 s, `PK_ON` when
   * either room has a PK on.
   */
  acceptPk(link: string): Promise<OpOk<"pk.accept">> {
    return this.client.request("pk.accept", { room: this.id, link });
  }
  /**
   * Declines another room's invitation to a PK (owner or admin, in this room; section 16.6):
   * the inviting room's staff get `pk.declined`. Errors as {@link Room.acceptPk}'s.
   */
  declinePk(link: string): Promise<OpOk<"pk.decline">> {
    return this.client.request("pk.decline", { room: this.id, link });
  }
  takeSeat(seat?: number): Promise<OpOk<"seat.take">> {
    return this.client.request("seat.take", seat === undefined ? { room: this.id } : { room: this.id, seat });
  }
  leaveSeat(): Promise<OpOk<"seat.leave">> {
    return this.client.request("seat.leave", { room: this.id });
  }
  lockSeat(seat: number, locked: boolean): Promise<OpOk<"seat.lock">> {
    return this.client.request("seat.lock", { room: this.id, seat, locked });
  }
  /** Locks or unlocks every seat at once (whoever sits stays). */
  lockAllSeats(locked: boolean): Promise<OpOk<"seat.lock_all">> {
    return this.client.request("seat.lock_all", { room: this.id, locked });
  }
  /** Changes the number of seats (owner or admin). */
  setSeatCount(seats: number): Promise<OpOk<"seat.count">> {
    return this.client.request("seat.count", { room: this.id, seats });
  }
  muteSeat(seat: number, muted: boolean): Promise<OpOk<"seat.mute">> {
    return this.client.request("seat.mute", { room: this.id, seat, muted });
  }
  /**
   * Moves oneself, or (owner or admin) `user`, to `seat`. With `swap`, a seat held by someone
   * else is exchanged with its holder (owner or admin) instead of refused as `SEAT_TAKEN`.
   */
  moveSeat(seat: number, user?: string, options: { swap?: boolean } = {}): Promise<OpOk<"seat.move">> {
    const d: OpRequest<"seat.move"> = { room: this.id, seat };
    if (user !== undefined) d.user = user;
    if (options.swap) d.swap = true;
    return this.client.request("seat.move", d);
  }
  kickFromSeat(user: string): Promise<OpOk<"seat.kick">> {
    return this.client.request("seat.kick", { room: this.id, user });
  }
  publishing(on: boolean): Promise<OpOk<"mic.publishing">> {
    return this.client.request("mic.publishing", { room: this.id, on });
  }
  /**
   * Sets and removes room attributes (owner or admin; section 5.38): `set` maps keys to any
   * JSON, `remove` lists keys. The snapshot's `attrs` follows the `room.attrs` events.
   */
  setAttrs(set: Record<string, unknown>, remove: string[] = []): Promise<OpOk<"room.attrs">> {
    const d: OpRequest<"room.attrs"> = { room: this.id };
    if (Object.keys(set).length > 0) d.set = set;
    if (remove.length > 0) d.remove = remove;
    return this.client.request("room.attrs", d);
  }
  /** `room.update` (owner or admin): only the fields given change. */
  update(d: Omit<OpRequest<"room.update">, "room">): Promise<OpOk<"room.update">> {
    return this.client.request("room.update", { ...d, room: this.id });
  }

  // Seats in apply mode: requests (members ask, staff answer) and invitations (sections 5.14–5.21).
  requestSeat(seat?: number): Promise<OpOk<"seat.request">> {
    return this.client.request("seat.request", seat === undefined ? { room: this.id } : { room: this.id, seat });
  }
  cancelSeatRequest(): Promise<OpOk<"seat.request.cancel">> {
    return this.client.request("seat.request.cancel", { room: this.id });
  }
  seatRequests(): Promise<OpOk<"seat.requests">> {
    return this.client.request("seat.requests", { room: this.id });
  }
  approveSeat(user: string): Promise<OpOk<"seat.approve">> {
    return this.client.request("seat.approve", { room: this.id, user });
  }
  rejectSeat(user: string): Promise<OpOk<"seat.reject">> {
    return this.client.request("seat.reject", { room: this.id, user });
  }
  inviteToSeat(user: string, seat?: number): Promise<OpOk<"seat.invite">> {
    return this.client.request("seat.invite", seat === undefined ? { room: this.id, user } : { room: this.id, user, seat });
  }
  acceptSeatInvite(): Promise<OpOk<"seat.invite.accept">> {
    return this.client.request("seat.invite.accept", { room: this.id });
  }
  rejectSeatInvite(): Promise<OpOk<"seat.invite.reject">> {
    return this.client.request("seat.invite.reject", { room: this.id });
  }

  // Room management (owner, some admin).
  /** Sets or changes the password; without one, unlocks. */
  lock(password?: string): Promise<OpOk<"room.lock">> {
    return this.client.request("room.lock", password === undefined ? { room: this.id } : { room: this.id, password });
  }
  setAdmin(user: string, admin: boolean): Promise<OpOk<"room.admin">> {
    return this.client.request("room.admin", { room: this.id, user, admin });
  }
  transfer(user: string): Promise<OpOk<"room.transfer">> {
    return this.client.request("room.transfer", { room: this.id, user });
  }
  /** `room.close`: every member is taken out (`left` with reason `closed`). */
  closeRoom(): Promise<OpOk<"room.close">> {
    return this.client.request("room.close", { room: this.id });
  }

  // Moderation (owner or admin).
  muteChat(user: string, seconds?: number): Promise<OpOk<"chat.mute">> {
    return this.client.request("chat.mute", seconds === undefined ? { room: this.id, user } : { room: this.id, user, seconds });
  }
  unmuteChat(user: string): Promise<OpOk<"chat.unmute">> {
    return this.client.request("chat.unmute", { room: this.id, user });
  }
  kick(user: string, banSeconds?: number): Promise<OpOk<"room.kick">> {
    return this.client.request(
      "room.kick",
      banSeconds === undefined ? { room: this.id, user } : { room: this.id, user, ban_seconds: banSeconds },
    );
  }
  ban(user: string, seconds?: number): Promise<OpOk<"room.ban">> {
    return this.client.request("room.ban", seconds === undefined ? { room: this.id, user } : { room: this.id, user, seconds });
  }
  unban(user: string): Promise<OpOk<"room.unban">> {
    return this.client.request("room.unban", { room: this.id, user });
  }
  bans(cursor?: string, limit?: number): Promise<OpOk<"room.bans">> {
    return this.client.request("room.bans", { room: this.id, ...(cursor ? { cursor } : {}), ...(limit ? { limit } : {}) });
  }

  members(cursor?: string, limit?: number): Promise<{ members: Member[]; count: number; cursor?: string }> {
    return this.client.request("member.list", { room: this.id, ...(cursor ? { cursor } : {}), ...(limit ? { limit } : {}) });
  }
  ranks(board: RankBoard, period: RankPeriod = "all"): Promise<OpOk<"rank.get">> {
    return this.client.request("rank.get", { room: this.id, board, period });
  }

  /**
   * Sends a gift. The order is idempotent by `reqId` (a fresh UUIDv7 unless given): a reply
   * lost to a reconnect, an `UNAVAILABLE`, or a `NOT_IN_ROOM` met while the room was being
   * rejoined is retried with the same `reqId` once the room is joined again, so it is paid
   * once (section 6.1).
   *
   * Every rejection is a `ChorusError` carrying the order's key as `e.reqId`. When the order
   * may have been taken and its answer was lost (the attempts ran out on a retryable failure,
   * the room was not joined again in time or was left, the client was closed: `e.retryable`,
   * or `CLOSED`), its code is the last such failure's: send the gift again with
   * `{ reqId: e.reqId }` once the room is joined, and it is paid at most once. Another code
   * is the order's own answer (`INSUFFICIENT_FUNDS`, `GIFT_VOIDED`, …).
   */
  async sendGift(
    gift: string,
    to: string[] | "seats",
    opts: { count?: number; reqId?: string; attempts?: number } = {},
  ): Promise<OpOk<"gift.send">> {
    const req_id = opts.reqId ?? uuidv7();
    const d = { room: this.id, req_id, gift, to, ...(opts.count ? { count: opts.count } : {}) };
    const attempts = opts.attempts ?? 4;
    // The last failure that left the order's outcome unknown (it may have been debited).
    let unknown: ChorusError | null = null;
    const fail = (e: unknown): ChorusError => {
      const err = e instanceof ChorusError ? e : new ChorusError("INTERNAL", String(e), "gift.send");
      // After a failure whose answer was lost, one that says nothing of the order (the room not
      // joined again in time, or left, or its rejoin refused before the retry went; the client
      // closed) leaves the outcome unknown: the rejection says so, with the last retryable code.
      const silent = err.retryable || err.code === "NOT_IN_ROOM" || err.code === "CLOSED" || notSent.has(err);
      const out =
        unknown && unknown !== err && silent
          ? new ChorusError(
              err.retryable ? err.code : unknown.code,
              `outcome unknown after "${unknown.message}", then "${err.message}"`,
              "gift.send",
            )
          : err;
      out.reqId = req_id;
      return out;
    };
    for (let i = 0; ; i++) {
      try {
        return await this.client.request("gift.send", d);
      } catch (e) {
        // `NOT_IN_ROOM` too: the gateway's retry may reach the room's next runtime before this
        // client rejoined it (protocol section 5); once rejoined, the same order goes again.
        const again = e instanceof ChorusError && (e.retryable || e.code === "NOT_IN_ROOM");
        // A retry that waited for the room's rejoin in vain was not sent: it leaves nothing unknown.
        if (e instanceof ChorusError && (e.retryable || e.code === "CLOSED") && !notSent.has(e)) unknown = e;
        if (!again || i + 1 >= attempts || this.state === "left") throw fail(e);
        await sleep(backoff(i, 250, 4000));
        // The sender must be a member again (after a reconnect) before the retry.
        try {
          await this.joined();
        } catch (j) {
          throw fail(j);
        }
      }
    }
  }

  /**
   * Resolves once the room is joined (now, or when its join or rejoin succeeds); rejects with
   * `NOT_IN_ROOM` when the room ends first, `TIMEOUT` after `timeoutMs`.
   */
  async joined(timeoutMs = 15_000): Promise<void> {
    if (this.state === "joined") return;
    if (this.state === "left") throw new ChorusError("NOT_IN_ROOM", "the client left the room");
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        off();
        reject(new ChorusError("TIMEOUT", `the room was not joined within ${timeoutMs} ms`));
      }, timeoutMs);
      // Every join's reply emits `snapshot`, the room joined.
      const offJoined = this.on("snapshot", () => {
        off();
        resolve();
      });
      const offLeft = this.on("left", (l) => {
        off();
        reject(new ChorusError("NOT_IN_ROOM", `the client left the room (${l.reason})`));
      });
      const off = () => {
        clearTimeout(timer);
        offJoined();
        offLeft();
      };
    });
  }

  /**
   * Leaves the room. The client lets go of it at once: a `join` of the same room made before
   * the reply is a new join, sent after the leave, and wins (section 4.3: the last sent).
   *
   * While the room is being rejoined (after a reconnect, a `room.left` `unavailable`) it ends
   * at once (`left`, reason `left`) and is not rejoined: with no join of it sent on the
   * current connection nothing is sent (the connection is not in the room; the server ends
   * the old connection's membership after its grace window); a join of it already sent is
   * followed by `room.leave` once it is answered, if it put the connection back in. Resolves
   * once the connection is out of the room (a `NOT_IN_ROOM` answer, or a connection lost under
   * the leave, means it is); calling it again, or on an ended room, resolves as well.
   */
  leave(): Promise<void> {
    if (this.leaveDone) return this.leaveDone;
    if (this.state === "left") return Promise.resolve();
    this.leaving = true;
    this.rejoinGen++;
    this.client.forget(this);
    this.leaveDone = this.client.leaveRoom(this);
    return this.leaveDone;
  }

  /**
   * @internal Resolves once a request `op` of this room may go: at once unless the connection
   * may not be in the room (`away`), else when the room's rejoin succeeds. Rejects when the room
   * ends first, with the refused rejoin's error, `UNAVAILABLE` when the rejoin attempts ran
   * out, `CLOSED` after `Client.close()`, else `NOT_IN_ROOM`; or after `timeoutMs`
   * (`TIMEOUT`). Every rejection is of a request that was not sent.
   */
  ready(op: string, timeoutMs: number): Promise<void> {
    if (!this.away) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const unsent = (e: ChorusError) => {
        notSent.add(e);
        reject(e);
      };
      const w = {
        resolve: () => {
          clearTimeout(timer);
          this.waiters.delete(w);
          resolve();
        },
        fail: (reason: string, err: ChorusError | null) => {
          clearTimeout(timer);
          this.waiters.delete(w);
          const code = err ? err.code : reason === "client_closed" ? "CLOSED" : "NOT_IN_ROOM";
          const why = err ? `the room's rejoin failed (${err.message})` : `the client is not in the room (${reason})`;
          unsent(new ChorusError(code, `not sent: ${why}`, op));
        },
      };
      const timer = setTimeout(() => {
        this.waiters.delete(w);
        unsent(new ChorusError("TIMEOUT", `not sent: the room was not rejoined within ${timeoutMs} ms`, op));
      }, timeoutMs);
      this.waiters.add(w);
    });
  }

  // ---- what the client feeds in ----

  /** @internal The first join while it is under way (settled once it ended). */
  firstJoin: Promise<void> = Promise.resolve();

  /**
   * @internal A join asked for by the application: the first one, or one made again while a
   * join of another room goes (section 4.3), then with `since` once the room was joined.
   */
  async join(): Promise<void> {
    const since = this.position ?? undefined;
    if (since) {
      // A rejoin under way gives way to this join, which resumes the room the same way. The
      // connection may be moved to another room before it: the room's requests wait for it.
      this.rejoinGen++;
      this.away = true;
      if (this.state !== "rejoining") {
        this.state = "rejoining";
        this.emit("rejoining", { reason: "join" });
      }
    }
    const gen = this.rejoinGen;
    let ok: JoinOk | null;
    try {
      ok = await this.client.joinRoom(this, {
        room: this.id,
        ...(since ? { since } : {}),
        ...(this.password ? { password: this.password } : {}),
      });
    } catch (e) {
      // The reconnect rejoins after a disconnect; otherwise the rejoin loop takes over.
      const gone = e instanceof ChorusError && e.code === "DISCONNECTED";
      if (since && gen === this.rejoinGen && this.state === "rejoining" && !gone) this.rejoin("join failed");
      throw e;
    }
    // Moved out by a later join (`left`), or a later join of this room was applied first.
    if (!ok || gen !== this.rejoinGen) return;
    this.applyJoin(ok, since, false);
  }

  /**
   * Takes a join's reply: the position, the snapshot, `joined`. The first applies the events
   * that came before it; the others (and every rejoin's) are `resumed`, resynced when the join
   * had no `since` (the snapshot replaced the room).
   */
  private applyJoin(ok: JoinOk, since: Position | undefined, rejoin: boolean): void {
    const first = this.position === null;
    this.position = { epoch: ok.epoch, seq: ok.seq };
    this.snapshot = ok.snapshot;
    this.state = "joined";
    this.away = false;
    // The requests that waited for this join go now, after it.
    for (const w of [...this.waiters]) w.resolve();
    this.emit("snapshot", ok.snapshot);
    if (first) {
      const early = this.early;
      this.early = [];
      for (const f of early) this.onEvent(f);
    }
    if (rejoin || !first) this.emit("resumed", { resync: ok.resync || !since });
  }

  /** @internal An event frame addressed to this room. */
  onEvent(f: EventFrame): void {
    if (this.state === "left") return;
    const d = (f.d ?? {}) as Record<string, unknown>;
    // Sequenced: it has a position (section 3.3), whether or not this client knows its name.
    if (typeof f.epoch === "number" && typeof f.seq === "number") {
      const p = this.position;
      if (!p) {
        this.early.push(f);
        return;
      }
      const next = (f.epoch === p.epoch && f.seq === p.seq + 1) || (f.epoch > p.epoch && f.seq === 1);
      if (!next) {
        // Rule 2: a duplicate is dropped. Rule 3: anything else is a gap, repaired by one rejoin.
        const old = f.epoch < p.epoch || (f.epoch === p.epoch && f.seq <= p.seq);
        if (!old && this.state === "joined") this.rejoin("gap");
        return;
      }
      this.position = { epoch: f.epoch, seq: f.seq };
      // The snapshot is the room as of the last event folded in: its position moves too.
      if (this.snapshot) {
        this.snapshot.epoch = f.epoch;
        this.snapshot.seq = f.seq;
      }
      this.fold(f.ev, d);
      this.emitRaw(f.ev, { ...d, room: this.id, epoch: f.epoch, seq: f.seq });
      return;
    }
    this.fold(f.ev, d);
    this.emitRaw(f.ev, { ...d, room: this.id });
  }

  /** @internal `room.left` for this room (section 7.3). */
  onLeft(reason: string): void {
    if (reason === "unavailable") this.rejoin(reason);
    else this.finish(reason);
  }

  /** @internal The connection dropped: the room waits for the reconnect. */
  onDisconnected(): void {
    // A first join fails with the connection, and the room goes with it.
    if (this.state === "left" || this.state === "joining" || this.leaving) return;
    this.rejoinGen++;
    this.away = true;
    if (this.state !== "rejoining") {
      this.state = "rejoining";
      this.emit("rejoining", { reason: "disconnected" });
    }
  }

  /**
   * Rejoins with `since` (section 8, rules 3–5), retrying `UNAVAILABLE` with backoff. Events
   * that arrive meanwhile are applied when they directly follow the position, dropped
   * otherwise; the replay before the reply fills the gap.
   */
  rejoin(reason: string): void {
    if (this.state === "left" || this.leaving) return;
    const gen = ++this.rejoinGen;
    // After a gap the connection is still in the room; otherwise it is not (or may not be).
    if (reason !== "gap") this.away = true;
    if (this.state !== "rejoining") {
      this.state = "rejoining";
      this.emit("rejoining", { reason });
    }
    void (async () => {
      let last: ChorusError | null = null;
      for (let attempt = 0; attempt < MAX_REJOIN_ATTEMPTS; attempt++) {
        // A join of another room under way goes first (section 4.3): if it succeeds, the
        // connection is there and this room ends (`switched`); a rejoin sent after it would
        // take the connection back.
        await this.client.othersJoined(this);
        if (gen !== this.rejoinGen) return;
        try {
          const since = this.position ?? undefined;
          const ok = await this.client.joinRoom(this, {
            room: this.id,
            ...(since ? { since } : {}),
            ...(this.password ? { password: this.password } : {}),
          });
          if (gen !== this.rejoinGen || !ok) return;
          this.applyJoin(ok, since, true);
          return;
        } catch (e) {
          if (gen !== this.rejoinGen) return;
          if (e instanceof ChorusError && e.code === "DISCONNECTED") return; // the reconnect rejoins
          if (!(e instanceof ChorusError) || !e.retryable) {
            this.finish(e instanceof ChorusError ? e.code : "error", e instanceof ChorusError ? e : null);
            return;
          }
          last = e;
          await sleep(backoff(attempt, 200, 5000));
        }
      }
      if (gen === this.rejoinGen) this.finish("unavailable", last);
    })();
  }

  /**
   * @internal Ends the room (`left` with `reason`); `err` is the refused rejoin's error, which
   * the requests that waited for the rejoin fail with.
   */
  finish(reason: string, err: ChorusError | null = null): void {
    if (this.state === "left") return;
    this.state = "left";
    this.rejoinGen++;
    this.client.forget(this);
    for (const w of [...this.waiters]) w.fail(reason, err);
    this.emit("left", { reason });
  }

  /** A listener of this room threw: reported as the client's are (its `error` event, else the console). */
  protected override listenerFailed(e: ListenerError): void {
    this.client.listenerFailed(e);
  }

  /** Keeps the snapshot current. */
  private fold(ev: string, d: Record<string, unknown>): void {
    const s = this.snapshot;
    if (!s) return;
    switch (ev) {
      case "seat.update": {
        const i = d.index as number;
        const { by: _by, cause: _cause, reason: _reason, ...seat } = d;
        if (i < s.seats.length) s.seats[i] = seat as unknown as Snapshot["seats"][number];
        break;
      }
      case "room.update": {
        for (const k of ["title", "notice", "cover", "seat_mode", "host_seat", "locked", "chat_muted", "slow_mode"] as const) {
          if (k in d) (s as unknown as Record<string, unknown>)[k] = d[k];
        }
        if (typeof d.seats === "number") {
          const n = d.seats;
          s.seats = s.seats.slice(0, n);
          for (let i = s.seats.length; i < n; i++) {
            s.seats.push({ index: i, user: null, locked: false, muted: false, admin_muted: false, publishing: false });
          }
        }
        break;
      }
      case "chat.pin": {
        const line = d.line as Snapshot["pinned"] | null;
        if (line) s.pinned = line;
        else delete s.pinned;
        break;
      }
      case "room.attrs": {
        const attrs: Record<string, unknown> = { ...(s.attrs ?? {}) };
        for (const k of (d.removed as string[] | undefined) ?? []) delete attrs[k];
        Object.assign(attrs, (d.set as Record<string, unknown> | undefined) ?? {});
        s.attrs = attrs;
        break;
      }
      case "room.role": {
        const user = d.user as string;
        s.admins = s.admins.filter((a) => a !== user);
        if (d.role === "owner") s.owner = user;
        if (d.role === "admin") s.admins.push(user);
        break;
      }
      case "member.join":
        s.members += 1;
        break;
      case "member.leave":
        s.members = Math.max(0, s.members - 1);
        break;
      case "member.count":
        s.members = d.count as number;
        break;
      case "room.likes":
        s.likes = d.total as number;
        break;
      case "pk.start":
        s.pk = {
          pk: d.pk as number,
          red: 0,
          blue: 0,
          ends_at: d.ends_at as number,
          red_seats: d.red_seats as number[],
          blue_seats: d.blue_seats as number[],
        };
        // A PK between two rooms (section 16.6): the other room, kept while the PK is on.
        if (d.vs) s.pk.vs = d.vs as PkVs;
        break;
      case "pk.score":
        if (s.pk && s.pk.pk === d.pk) {
          s.pk.red = d.red as number;
          s.pk.blue = d.blue as number;
        }
        break;
      case "pk.end":
        delete s.pk;
        break;
    }
  }

  private emitRaw(ev: string, v: unknown): void {
    (this.emit as (n: string, v: unknown) => void)(ev, v);
  }
}
