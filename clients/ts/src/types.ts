// The wire types of the Chorus client protocol (protocol/PROTOCOL.md in the repository).
// Fields the server may add later are allowed by every type: clients ignore what they do not
// know.

/** A position in a room's event stream (section 4.4). */
export interface Position {
  epoch: number;
  seq: number;
}

/** A member's profile (section 14.1); every field optional. */
export interface Profile {
  name?: string;
  avatar?: string;
  region?: string;
}

/** One seat as the snapshot and `seat.update` show it (section 5.3). */
export interface Seat {
  index: number;
  user: string | null;
  locked: boolean;
  muted: boolean;
  admin_muted: boolean;
  publishing: boolean;
  publish_by?: number;
  /** The seated user is a robot (present only then). */
  robot?: boolean;
}

/** The room now, as `room.join` answers it. */
export interface Snapshot {
  room: string;
  title: string;
  owner: string;
  admins: string[];
  locked: boolean;
  notice: string;
  cover: string;
  seat_mode: "free" | "apply";
  host_seat: boolean;
  /** The chat is muted for everyone but the owner and the admins (absent when not). */
  chat_muted?: boolean;
  /** Slow mode: seconds between two chat lines of a member who is not staff (absent: off). */
  slow_mode?: number;
  /** The room's app-defined attributes (section 5.38; absent when none). */
  attrs?: Record<string, unknown>;
  /** The room's like total (section 5.39; absent at 0). */
  likes?: number;
  seats: Seat[];
  members: number;
  /** How many of the members are robots (absent when none). */
  robots?: number;
  /**
   * The PK that is on, with its teams (section 16.5; absent: none). In a PK between two rooms
   * (section 16.6) the seat lists are empty, red is this room, and `vs` names the other room.
   */
  pk?: PkScore & { red_seats: number[]; blue_seats: number[] };
  /** The pinned chat line (section 5.42; absent: none). */
  pinned?: PinnedLine;
  epoch: number;
  seq: number;
}

/** A pinned chat line: the line (its seq in `epoch`, sender and text), who pinned it and when. */
export interface PinnedLine {
  seq: number;
  epoch: number;
  from: string;
  text: string;
  by: string;
  at: number;
}

export interface JoinOk extends Position {
  snapshot: Snapshot;
  resync: boolean;
}

export interface Gift {
  id: string;
  name: string;
  price: number;
  kind: "normal" | "lucky";
  effect_level: number;
}

export interface Member {
  user: string;
  role: "owner" | "admin" | "member";
  seat?: number;
  robot?: boolean;
  joined_at: number;
  away?: boolean;
  p?: Profile;
  /** Guards the room's owner (section 16.4). */
  guard?: boolean;
  /** VIP level (absent at 0). */
  vip?: number;
}

/** A guard plan on sale (section 16.4). */
export interface GuardPlan {
  id: string;
  days: number;
  price: number;
}

/**
 * Every operation: its request `d` and its `ok` answer. A new server operation is one entry
 * here; `Client.request` and the helpers are typed from it.
 */
export interface Ops {
  ping: [Record<string, never>, { t: number }];
  "room.create": [
    { room?: string; title?: string; seats?: number; password?: string; seat_mode?: "free" | "apply"; host_seat?: boolean },
    { room: string },
  ];
  "room.join": [{ room: string; since?: Position; password?: string }, JoinOk];
  "room.leave": [{ room: string }, Record<string, never>];
  /** `mention_all`: the line mentions everyone ("@all"); the owner or an admin only (section 5.5). */
  "chat.send": [
    { room: string; text: string; mentions?: string[]; reply_to?: number; mention_all?: boolean },
    { seq: number },
  ];
  "chat.recall": [{ room: string; seq: number }, Record<string, never>];
  "chat.pin": [{ room: string; seq: number | null }, Record<string, never>];
  "room.attrs": [{ room: string; set?: Record<string, unknown>; remove?: string[] }, Record<string, never>];
  "custom.send": [{ room: string; type: string; data?: unknown; volatile?: boolean }, { seq?: number }];
  "like.send": [{ room: string; count?: number }, { total: number }];
  "pk.start": [{ room: string; seconds?: number; red?: number[]; blue?: number[] }, { pk: number; ends_at: number }];
  "pk.stop": [{ room: string }, Record<string, never>];
  /** Invites room `vs` to a PK between the rooms (section 16.6): `link` is the match's id. */
  "pk.invite": [{ room: string; vs: string; seconds?: number }, { link: string; expires_at: number }];
  /** Accepts another room's invitation: the PK starts in both rooms. */
  "pk.accept": [{ room: string; link: string }, { pk: number; ends_at: number }];
  "pk.decline": [{ room: string; link: string }, Record<string, never>];
  "report.send": [
    { room: string; user?: string; seq?: number; reason: string; text?: string },
    /** `id`: the report's id in the app's moderation queue (absent for a duplicate). */
    { duplicate?: boolean; id?: number },
  ];
  "seat.take": [{ room: string; seat?: number }, { seat: number }];
  "seat.leave": [{ room: string }, Record<string, never>];
  "seat.lock": [{ room: string; seat: number; locked: boolean }, Record<string, never>];
  "seat.move": [{ room: string; seat: number; user?: string; swap?: boolean }, { seat: number }];
  "seat.lock_all": [{ room: string; locked: boolean }, Record<string, never>];
  "seat.mute": [{ room: string; seat: number; muted: boolean }, Record<string, never>];
  "seat.kick": [{ room: string; user: string }, Record<string, never>];
  "seat.count": [{ room: string; seats: number }, Record<string, never>];
  "seat.request": [{ room: string; seat?: number }, { expires_at: number }];
  "seat.request.cancel": [{ room: string }, Record<string, never>];
  "seat.requests": [{ room: string }, { requests: { user: string; seat: number | null; expires_at: number }[] }];
  "seat.approve": [{ room: string; user: string }, { seat: number }];
  "seat.reject": [{ room: string; user: string }, Record<string, never>];
  "seat.invite": [{ room: string; user: string; seat?: number }, { expires_at: number }];
  "seat.invite.accept": [{ room: string }, { seat: number }];
  "seat.invite.reject": [{ room: string }, Record<string, never>];
  "mic.publishing": [{ room: string; on: boolean }, Record<string, never>];
  "room.update": [
    { room: string; title?: string; notice?: string; cover?: string; seat_mode?: "free" | "apply"; host_seat?: boolean; chat_muted?: boolean; slow_mode?: number },
    Record<string, never>,
  ];
  /** `password` sets or changes it; absent (or null) unlocks. */
  "room.lock": [{ room: string; password?: string | null }, Record<string, never>];
  "room.admin": [{ room: string; user: string; admin: boolean }, Record<string, never>];
  "room.transfer": [{ room: string; user: string }, Record<string, never>];
  "room.close": [{ room: string }, Record<string, never>];
  "room.open": [{ room: string }, Record<string, never>];
  "chat.mute": [{ room: string; user: string; seconds?: number }, Record<string, never>];
  "chat.unmute": [{ room: string; user: string }, Record<string, never>];
  "room.kick": [{ room: string; user: string; ban_seconds?: number }, Record<string, never>];
  "room.ban": [{ room: string; user: string; seconds?: number }, Record<string, never>];
  "room.unban": [{ room: string; user: string }, Record<string, never>];
  "room.bans": [
    { room: string; cursor?: string; limit?: number },
    { bans: { user: string; until: number | null; by: string | null }[]; next: string | null },
  ];
  "room.list": [
    { cursor?: string; limit?: number; region?: string; query?: string },
    { rooms: RoomListEntry[]; cursor?: string },
  ];
  "member.list": [
    { room: string; cursor?: string; limit?: number },
    { members: Member[]; count: number; cursor?: string },
  ];
  "gift.send": [
    { room: string; req_id: string; gift: string; count?: number; to: string[] | "seats" },
    { order: string; balance: number },
  ];
  "gift.list": [Record<string, never>, { gifts: Gift[] }];
  "rank.get": [
    | { scope?: "room"; room: string; board: RankBoard; period?: RankPeriod; limit?: number }
    | { scope: "app"; board: RankBoard; period?: RankPeriod; limit?: number },
    { scope?: "app"; room?: string; board: string; period: string; entries: RankEntry[] },
  ];
  "wallet.balance": [Record<string, never>, { balance: number; earnings: number }];
  "wallet.history": [
    { cursor?: string; limit?: number; kind?: string },
    { movements: Movement[]; next?: string },
  ];
  "wallet.transfer": [{ to: string; amount: number; req_id: string }, { balance: number; applied: boolean }];
  "wallet.checkin": [Record<string, never>, { reward: number; applied: boolean; balance: number }];
  "guard.plans": [Record<string, never>, { plans: GuardPlan[] }];
  "guard.buy": [
    { host: string; plan: string; req_id: string },
    { host: string; plan: string; expires_at: number; balance: number; applied: boolean },
  ];
  "guard.list": [
    /** Exactly one of `host` and `room` (the room's owner). */
    { host: string; room?: never; limit?: number } | { room: string; host?: never; limit?: number },
    { host: string; guards: { user: string; expires_at: number }[] },
  ];
  "auth.refresh": [{ token: string }, { exp: number }];
  "user.update": [Profile, { p: Profile }];
  "user.get": [{ users: string[] }, { profiles: Record<string, Profile> }];
  "follow.add": [{ user: string }, { added: boolean }];
  "follow.remove": [{ user: string }, { removed: boolean }];
  "follow.counts": [{ user?: string }, { following: number; followers: number }];
  "follow.list": [
    { user?: string; dir: "following" | "followers"; cursor?: string; limit?: number },
    { users: { user: string; at: number; p?: Profile }[]; next?: string },
  ];
  "follow.rooms": [{ limit?: number }, { rooms: { room: string; users: string[] }[] }];
  "im.send": [{ to: string; text: string; req_id: string; type?: string; data?: unknown }, { id: number; at: number }];
  "im.history": [{ with?: string; before?: number; limit?: number }, { messages: ImMessage[]; next: number | null }];
  "im.ack": [{ ids: number[] }, Record<string, never>];
  "im.block": [{ user: string }, Record<string, never>];
  "im.unblock": [{ user: string }, Record<string, never>];
  "im.blocks": [Record<string, never>, { blocks: string[] }];
}

/** One room of the directory (`room.list`, section 5.36). */
export interface RoomListEntry {
  room: string;
  title: string;
  owner: string;
  members: number;
  seated: number;
  score: number;
  robots: boolean;
  locked: boolean;
  region?: string;
  pinned?: boolean;
  /** A PK is on in the room (section 16.5; present only then). */
  pk?: boolean;
}

/** One movement of the caller's statement (`wallet.history`, section 6.5). */
export interface Movement {
  kind: string;
  account: "coins" | "earnings";
  amount: number;
  balance_after?: number;
  counterparty?: string;
  key: string;
  at: number;
}

/** A direct message: the `im` event's `d` and one entry of `im.history` (section 13.3). */
export interface ImMessage {
  /** Unique per message, growing with time: sort and deduplicate by it. */
  id: number;
  at: number;
  from: string;
  to: string;
  /** The text; for a typed message, what to show when the type is unknown. */
  text: string;
  /** A typed message's app-defined type (e.g. `"room.invite"`); absent for plain text. */
  type?: string;
  /** A typed message's JSON. */
  data?: unknown;
  p?: Profile;
  /** `true` when the app's backend sent it as `from` (its official account; section 13.8):
   * show it as the app's. A member's message never has it. */
  system?: boolean;
}

/** A leaderboard: top senders (contribution) or top receivers (charm). */
export type RankBoard = "senders" | "receivers";
/** A leaderboard's period: today, this week (from Monday) or all time (UTC days). */
export type RankPeriod = "day" | "week" | "all";
/** One leaderboard entry; `robot` is present (true) only for robots. */
export interface RankEntry {
  user: string;
  score: number;
  robot?: boolean;
}

export type OpName = keyof Ops;
export type OpRequest<K extends OpName> = Ops[K][0];
export type OpOk<K extends OpName> = Ops[K][1];

/** `seat.update`'s who and why (section 7.1). */
export interface SeatUpdate extends Seat {
  by: string | null;
  cause: "self" | "admin" | "server";
  reason?: string;
}

/** A member's badges as room events carry them (section 16.4); absent when unset. */
export interface Badges {
  guard?: boolean;
  vip?: number;
}

export interface ChatEvent extends Badges {
  from: string;
  text: string;
  p?: Profile;
  /** The sender is a robot (present only then). */
  robot?: boolean;
  /** The members the line mentions (present only then; section 5.5). */
  mentions?: string[];
  /** The line it answers: its seq in this epoch and its sender (present only then). */
  reply?: { seq: number; from: string };
  /** The line mentions everyone in the room, "@all", sent by the owner or an admin (present only then; section 5.5). */
  mention_all?: boolean;
}

/**
 * An app-defined message (section 5.37): `type` and `data` are the app's own. From a member
 * (`from`, with the sender's badges and profile as on chat) or from the app's backend
 * (`system`, no `from`). Sequenced unless it was sent volatile: then it has no `epoch`/`seq`.
 */
export interface CustomEvent extends Badges {
  from?: string;
  system?: boolean;
  type: string;
  data?: unknown;
  p?: Profile;
  robot?: boolean;
}

export interface GiftEvent extends Badges {
  order: string;
  from: string;
  to: string[];
  gift: string;
  count: number;
  coins: number;
  lucky_multiplier?: number;
  p?: Profile;
  to_p?: Record<string, Profile>;
  /** The sender is a robot (present only then). */
  robot?: boolean;
  /**
   * The combo streak (section 16.1), set by the room: this event's (last) order's number in
   * the streak; a storm event carries `merged` orders (absent: 1), and its `count` and
   * `coins` are their sums.
   */
  combo?: number;
  merged?: number;
  /** The streak's id (its first order's id), and its gifts and coins so far. */
  streak?: string;
  streak_count?: number;
  streak_coins?: number;
}

/** Sequenced room events (section 7.1): each carries `epoch` and `seq`. */
export interface SequencedEvents {
  chat: ChatEvent;
  /** A chat line was taken back (section 5.40): hide the `chat` whose seq is `line`, in this epoch. */
  "chat.recall": { line: number; from: string; by: string };
  /** The pinned line changed (section 5.42): `line` null when none is pinned now. */
  "chat.pin": { by: string; line: PinnedLine | null };
  /** Sequenced, or volatile when sent so (then without `epoch` and `seq`). */
  custom: CustomEvent;
  "seat.update": SeatUpdate;
  gift: GiftEvent;
  "gift.lucky": { order: string; user: string; multiplier: number; coins: number };
  "room.update": { by: string | null; title?: string; notice?: string; cover?: string; seat_mode?: "free" | "apply"; host_seat?: boolean; seats?: number; locked?: boolean; chat_muted?: boolean; slow_mode?: number };
  /** `by` null: the app's backend banned the admin. */
  "room.role": { user: string; role: "owner" | "admin" | "member"; by: string | null };
  /** Room attributes changed (section 5.38): only what changed; `by` null for the app's backend. */
  "room.attrs": { by: string | null; set?: Record<string, unknown>; removed?: string[] };
  moderation: { action: string; user: string | null; by: string | null; until?: number; at: number };
  "rocket.launch": RocketLaunch;
  /**
   * A PK began (section 16.5): a gift battle between the users on two teams of seats. `by`
   * null: the app's backend started it. With `vs`, it is a PK between two rooms (section
   * 16.6), which the app's backend matched or a host accepted (`pk.accept`; `by` null too):
   * the seat lists are empty, red is this room and blue the room `vs` names.
   */
  "pk.start": { pk: number; red_seats: number[]; blue_seats: number[]; ends_at: number; by: string | null; vs?: PkVs };
  /** A PK ended: its scores, the winner and each team's top sender (from this room's side with `vs`). */
  "pk.end": PkEnd;
}

/**
 * The other room of a PK between two rooms (section 16.6), and the match's id (the `link` the
 * app's backend gave `POST /admin/pk`, or the one the server made up). Each room of the match
 * is red in its own events and sees the other as blue.
 */
export interface PkVs {
  room: string;
  link: string;
}

/**
 * An invitation to a PK between two rooms (section 16.6), sent only to the invited room's
 * staff who are in it (volatile, never replayed): room `from`'s owner or admin `by` invites
 * this room to a PK of `seconds`. Answer it with `Room.acceptPk(link)` or `Room.declinePk(link)`
 * before `expires_at` (unix ms, 30 s after it was sent); a new invitation from the same room
 * replaces it.
 */
export interface PkInvited {
  link: string;
  from: string;
  by: string;
  seconds: number;
  expires_at: number;
}

/**
 * The room this room invited declined (section 16.6), sent only to this room's staff who are
 * in it (volatile): `vs` is the invited room (the name `invitePk` gave it), `by` who declined
 * there.
 */
export interface PkDeclined {
  link: string;
  vs: string;
  by: string;
}

/**
 * A PK's scores (coins), as `pk.score` and the snapshot show them. In a PK between two rooms
 * (section 16.6) `red` is this room's score (every gift sent in it) and `blue` the other
 * room's, refreshed about once a second; `vs` names the other room.
 */
export interface PkScore {
  pk: number;
  red: number;
  blue: number;
  ends_at: number;
  vs?: PkVs;
}

/**
 * The end of a PK (section 16.5). In a PK between two rooms (section 16.6) both rooms announce
 * the same two scores, each from its own side: `winner` "red" means this room won, `vs` names
 * the other room, and there is no `blue_top`. A stop in either room ends both.
 */
export interface PkEnd {
  pk: number;
  red: number;
  blue: number;
  winner: "red" | "blue" | "draw";
  red_top?: string;
  blue_top?: string;
  reason: "time" | "stopped";
  /** Who stopped it (absent when it ran its length, or when the app's backend stopped it). */
  by?: string;
  /** The other room of a PK between two rooms (section 16.6; absent within one room). */
  vs?: PkVs;
}

/** The room rocket launched (section 16.2): every reward listed was credited. */
export interface RocketLaunch {
  launch: number;
  level: number;
  fuel: number;
  rewards: { user: string; coins: number; why: "top" | "present" }[];
  /** The gift order whose coins filled the level, and its sender. */
  order?: string;
  by?: string;
}

/** Volatile room events (sections 7.2, 7.4): no position, never replayed. */
export interface VolatileEvents {
  "member.join": Badges & { user: string; robot?: boolean; p?: Profile; entrance?: boolean };
  "member.leave": { user: string; reason: string };
  "member.update": Badges & { user: string; p?: Profile };
  "member.count": { count: number };
  "rocket.progress": { level: number; fuel: number; target: number; launches: number };
  /** A PK's scores (sections 16.5, 16.6): latest wins, at a bounded rate. */
  "pk.score": PkScore;
  /** Likes added since the last one (section 5.39): at most one a second. */
  "room.likes": { total: number; added: number; recent: string[] };
  "seat.request": { user: string; seat: number | null; expires_at: number };
  "seat.request.update": { user: string; state: string; by?: string; seat?: number };
  "seat.invite": { user: string; by: string; seat: number | null; expires_at: number };
  "seat.invite.update": { user: string; state: string; by?: string; seat?: number };
  /** Another room invites this one to a PK between the rooms (staff only; section 16.6). */
  "pk.invite": PkInvited;
  /** The room this one invited to a PK declined (staff only; section 16.6). */
  "pk.declined": PkDeclined;
}

/** A room event as delivered to listeners: its data plus where it sits in the stream. */
export type RoomEvent<D> = D & { readonly room: string; readonly epoch?: number; readonly seq?: number };

/**
 * The sequenced events this client knows. A room tells them apart by their `epoch` and `seq`
 * (section 3.3), so a sequenced event added later still moves the position.
 */
export const SEQUENCED_EVENTS: ReadonlySet<string> = new Set([
  "chat",
  "chat.recall",
  "chat.pin",
  "seat.update",
  "gift",
  "gift.lucky",
  "room.update",
  "room.attrs",
  "room.role",
  "moderation",
  "rocket.launch",
  "pk.start",
  "pk.end",
]);

/** The protocol's error codes (section 10); a server may add codes: accept unknown ones. */
export type ErrorCode =
  | "BAD_FRAME"
  | "UNKNOWN_OP"
  | "BAD_REQUEST"
  | "UNAUTHORIZED"
  | "FORBIDDEN"
  | "NOT_IN_ROOM"
  | "ROOM_NOT_FOUND"
  | "ROOM_EXISTS"
  | "ROOM_LOCKED"
  | "SEAT_TAKEN"
  | "SEAT_LOCKED"
  | "NO_FREE_SEAT"
  | "NO_SUCH_SEAT"
  | "USER_NOT_IN_ROOM"
  | "NOT_SEATED"
  | "NO_SUCH_REQUEST"
  | "REQUEST_EXPIRED"
  | "ROOM_CLOSED"
  | "BANNED"
  | "CHAT_MUTED"
  | "SLOW_MODE"
  | "NO_SUCH_MESSAGE"
  | "BLOCKED"
  | "PK_ON"
  | "NO_PK"
  | "IDEMPOTENCY_CONFLICT"
  | "INSUFFICIENT_FUNDS"
  | "GIFT_VOIDED"
  | "RATE_LIMITED"
  | "QUOTA_EXCEEDED"
  | "NOT_A_SELLER"
  | "VIP_PROTECTED"
  | "UNAVAILABLE"
  | "INTERNAL";

/** The client's own failures of a request (see `ChorusError`). */
export type ClientErrorCode = "TIMEOUT" | "DISCONNECTED" | "CLOSED";

/** Close codes the client acts on (section 11). */
export const Close = {
  Normal: 1000,
  GoingAway: 1001,
  Policy: 1008,
  TooBig: 1009,
  SlowConsumer: 4000,
  TooManyConnections: 4001,
  HeartbeatTimeout: 4002,
  /** The platform suspended the user's account: the client does not reconnect. */
  Suspended: 4003,
} as const;
