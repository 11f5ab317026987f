// The demo room served by a Chorus node at `/`: join a room with a user name (demo tokens) or
// a pasted token, the seat grid (in apply mode members ask and staff approve), chat, hearts
// (volatile custom messages), the app backend's notices, gifts
// with an animation, a PK between two halves of the seats (staff start and stop it; everyone
// sees the score) or against another room (the app's backend matches two rooms, or the staff
// invite another room and its staff accept or decline, section 16.6 of PROTOCOL.md; staff may
// stop it), the wallet, the members (staff invite to a seat, mute chat and kick) and
// the connection's state. Built with the client package (`node build.mjs --web ...`).
import { Client, ChorusError, type ChatEvent, type Gift, type PkInvited, type Room, type Seat } from "../src/index.js";

const $ = <T extends HTMLElement = HTMLElement>(id: string): T => document.getElementById(id) as T;
const EMOJI: Record<string, string> = { rose: "🌹", heart: "❤️", rocket: "🚀", clover: "🍀" };

let client: Client | null = null;
let room: Room | null = null;
let me = "";
let gifts: Gift[] = [];
const members = new Set<string>();
/** Pending seat requests (staff only): requester → the seat asked for (null: any). */
const requests = new Map<string, number | null>();
/** Members whose chat is muted, as the room's `moderation` events said. */
const chatMuted = new Set<string>();
/** A PK against another room that this page stopped, until its pk.end comes. */
let pkEnding: number | null = null;
/** The chat line the next send answers (its Reply button), until sent or cancelled. */
let replying: { seq: number; from: string } | null = null;

function el<K extends keyof HTMLElementTagNameMap>(tag: K, text?: string, cls?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

function setConn(state: string, text: string): void {
  const c = $("conn");
  c.dataset.state = state;
  c.textContent = text;
}

function log(text: string, cls = ""): HTMLElement {
  const list = $("chat-log");
  const li = el("li", text, cls);
  list.append(li);
  while (list.children.length > 300) list.firstChild?.remove();
  list.scrollTop = list.scrollHeight;
  return li;
}

/**
 * A chat line: a quote of the line it answers, highlighted when it mentions this user or
 * everyone (a staff "@all", `mention_all`; not one's own line), with a Reply button, a recall
 * button on one's own lines and, for the staff, on others', a report button on others' and,
 * for the staff, a Pin button.
 */
function chatLine(e: ChatEvent & { seq?: number }): void {
  const { from, text, seq } = e;
  const li = log(`${from}: ${text}`);
  if (e.reply) {
    // The quoted line's text while the page still shows it (recalled lines lose it).
    const quoted = document.querySelector<HTMLElement>(`#chat-log li[data-seq="${e.reply.seq}"]`)?.dataset.text;
    li.prepend(el("span", `↪ ${e.reply.from}: ${quoted ?? "…"}`, "quote"));
  }
  if (e.mentions?.includes(me) || (e.mention_all && from !== me)) li.classList.add("mentions-me");
  if (seq === undefined) return;
  li.dataset.seq = String(seq);
  li.dataset.text = text;
  const r = el("button", "Reply", "reply");
  r.title = "answer this line (chat.send with reply_to)";
  r.onclick = () => startReply(seq, from, text);
  li.append(r);
  const s = room?.snapshot;
  const staff = !!s && (s.owner === me || s.admins.includes(me));
  if (from !== me) {
    const f = el("button", "⚑", "report");
    f.title = "report this line to the moderators (report.send)";
    f.onclick = () =>
      void run("chat-error", async () => {
        const ok = await room!.report("inappropriate", { seq });
        f.replaceWith(el("span", ok.duplicate ? "reported already" : "reported", "reported"));
      });
    li.append(f);
  }
  if (staff) {
    const p = el("button", "Pin", "pin");
    p.title = "pin this line above the chat for everyone (chat.pin)";
    p.onclick = () => void run("chat-error", () => room!.pinChat(seq));
    li.append(p);
  }
  if (from !== me && !staff) return;
  const b = el("button", "↩", "recall");
  b.title = "take this line back (chat.recall)";
  b.onclick = () => void run("chat-error", () => room!.recallChat(seq));
  li.append(b);
}

/** The pinned line above the chat (from the snapshot, which `chat.pin` events keep current); staff may take it down. */
function renderPinned(staff: boolean): void {
  const p = room?.snapshot?.pinned;
  $("chat-pinned").hidden = !p;
  $("chat-pinned-text").textContent = p ? `📌 ${p.from}: ${p.text}` : "";
  $("chat-unpin").hidden = !staff;
}

/** Reply mode: the bar above the input says which line the next send answers. */
function startReply(seq: number, from: string, text: string): void {
  replying = { seq, from };
  $("chat-replying-text").textContent = `replying to ${from}: ${text.length > 40 ? `${text.slice(0, 40)}…` : text}`;
  $("chat-replying").hidden = false;
  $("chat-input").focus();
}

function stopReply(): void {
  replying = null;
  $("chat-replying").hidden = true;
  $("chat-replying-text").textContent = "";
}

/**
 * The members a line mentions: the answered line's sender, then the `@name`s that name a
 * member now (others stay plain text, as the server would refuse them); not oneself, each
 * once, at most 10.
 */
function mentionsOf(text: string, reply: { from: string } | null): string[] {
  const names = [...(reply ? [reply.from] : []), ...[...text.matchAll(/@([A-Za-z0-9_.:@+|-]+)/g)].map((m) => m[1]!)];
  const out: string[] = [];
  for (const n of names) {
    // "@bob:" or "@bob." at the end of a phrase names bob.
    const u = members.has(n) ? n : n.replace(/[.:]+$/, "");
    if (u !== me && members.has(u) && !out.includes(u)) out.push(u);
  }
  return out.slice(0, 10);
}

/** An error as the page shows it: a server's with its code ("PK_ON: …"). */
function errorText(e: unknown): string {
  return e instanceof ChorusError ? `${e.code}: ${e.message.split(": ").slice(2).join(": ")}` : String(e);
}

function showError(id: string, e: unknown): void {
  $(id).textContent = errorText(e);
  setTimeout(() => ($(id).textContent = ""), 4000);
}

async function run(id: string, f: () => Promise<unknown>): Promise<void> {
  try {
    await f();
  } catch (e) {
    showError(id, e);
  }
}

/** Whether demo tokens are on: without a user name the node answers 400 when they are, 404 when not. */
async function demoTokens(): Promise<boolean> {
  const r = await fetch("/demo/token").catch(() => null);
  return r !== null && r.status === 400;
}

async function fetchToken(user: string): Promise<string> {
  const r = await fetch(`/demo/token?user=${encodeURIComponent(user)}`);
  const body = (await r.json()) as { token?: string; error?: string };
  if (!r.ok || !body.token) throw new Error(body.error ?? `HTTP ${r.status}`);
  return body.token;
}

function renderSeats(): void {
  const grid = $("seats");
  grid.replaceChildren();
  const s = room?.snapshot;
  if (!s || !room) return;
  const staff = s.owner === me || s.admins.includes(me);
  for (const seat of s.seats) {
    const card = seatCard(seat, staff, s.seat_mode === "apply");
    if (s.pk?.red_seats.includes(seat.index)) card.classList.add("red");
    if (s.pk?.blue_seats.includes(seat.index)) card.classList.add("blue");
    grid.append(card);
  }
  renderPk(staff);
  // A requester seated another way (approved, or by an admin's move) has no request left.
  for (const seat of s.seats) if (seat.user) requests.delete(seat.user);
  renderStaff(staff, s.seat_mode);
  renderChatRules(staff, s.chat_muted === true, s.slow_mode ?? 0);
  renderPinned(staff);
}

/** The room's chat rules for everyone to see, and the staff's switches for them. */
function renderChatRules(staff: boolean, muted: boolean, slow: number): void {
  const rules = [muted ? "the chat is muted for members" : "", slow > 0 ? `slow mode: one line every ${slow} s` : ""];
  $("chat-rules").textContent = rules.filter(Boolean).join(" · ");
  if (!staff || !room) return;
  const r = room;
  const mute = $<HTMLButtonElement>("chat-mute");
  mute.textContent = muted ? "Let members chat" : "Mute the chat for members";
  mute.onclick = () => run("seat-error", () => r.update({ chat_muted: !muted }));
  const select = $<HTMLSelectElement>("slow-mode");
  if (![...select.options].some((o) => o.value === String(slow))) {
    // An interval set elsewhere (another client, the API) that the list does not offer.
    const other = el("option", `${slow} s`);
    other.value = String(slow);
    select.append(other);
  }
  select.value = String(slow);
  select.onchange = () => run("seat-error", () => r.update({ slow_mode: Number(select.value) }));
}

/**
 * The PK that is on (its score and time left), and the staff's button to start or stop one.
 * Against another room (`vs`), red is this room and blue the other one, named by its id.
 */
function renderPk(staff: boolean): void {
  const pk = room?.snapshot?.pk;
  $("pk").hidden = !pk;
  if (pk) {
    $("pk-title").textContent = pk.vs ? `PK #${pk.pk} vs ${pk.vs.room}` : `PK #${pk.pk}`;
    $("pk-red-name").textContent = pk.vs ? "This room" : "red";
    $("pk-blue-name").textContent = pk.vs ? pk.vs.room : "blue";
    $("pk-red").textContent = String(pk.red);
    $("pk-blue").textContent = String(pk.blue);
    const total = pk.red + pk.blue;
    $("pk-bar").style.width = `${total === 0 ? 50 : (100 * pk.red) / total}%`;
    $("pk-left").textContent = pkEnding === pk.pk ? "ending…" : `${Math.max(0, Math.ceil((pk.ends_at - Date.now()) / 1000))} s left`;
  }
  if (!staff || !room) return;
  const r = room;
  // Another room can be invited while no PK is on.
  $<HTMLButtonElement>("pk-invite").disabled = pk !== undefined;
  const toggle = $<HTMLButtonElement>("pk-toggle");
  toggle.textContent = pk ? "Stop the PK" : "Start a PK";
  // A PK against another room ends a second or two after the stop (the rooms exchange their
  // final scores): the button waits for its pk.end.
  toggle.disabled = pk !== undefined && pkEnding === pk.pk;
  toggle.onclick = () =>
    run("seat-error", async () => {
      if (!pk) return r.startPk({ seconds: 60 });
      await r.stopPk();
      if (pk.vs && room?.snapshot?.pk?.pk === pk.pk) {
        pkEnding = pk.pk;
        renderPk(true);
      }
    });
}

/** The staff invite another room to a PK of 60 s (its staff get the invitation, and 30 s to answer). */
async function invitePk(): Promise<void> {
  const input = $<HTMLInputElement>("pk-invite-room");
  const vs = input.value.trim();
  if (!room || !vs) return;
  try {
    await room.invitePk(vs, { seconds: 60 });
    input.value = "";
    log(`invited ${vs}… (a PK of 60 s, waiting for its staff)`, "sys");
  } catch (e) {
    log(`could not invite ${vs}: ${errorText(e)}`, "sys");
  }
}

/**
 * Another room's invitation to a PK (its staff's `pk.invite`; staff only), with Accept and
 * Decline, until answered or lapsed at `expires_at`. One box per inviting room: a newer
 * invitation from it replaces the one shown.
 */
function showPkInvite(e: PkInvited): void {
  const list = $("pk-invites");
  for (const old of [...list.children] as HTMLElement[]) if (old.dataset.from === e.from) old.remove();
  const box = el("div", undefined, "pk-invite");
  box.dataset.from = e.from;
  box.dataset.link = e.link;
  box.append(el("span", `PK invitation from ${e.from} by ${e.by}, ${e.seconds} s`));
  const done = () => {
    clearTimeout(timer);
    box.remove();
    list.hidden = list.children.length === 0;
  };
  const timer = setTimeout(() => {
    if (!box.isConnected) return;
    done();
    log(`the PK invitation from ${e.from} lapsed`, "sys");
  }, Math.max(0, e.expires_at - Date.now()));
  const answer = (label: string, f: (r: Room) => Promise<unknown>) => {
    const b = el("button", label, label === "Accept" ? "" : "secondary");
    b.dataset.action = label.toLowerCase();
    b.type = "button";
    b.onclick = () =>
      run("seat-error", async () => {
        done();
        if (room) await f(room);
      });
    box.append(b);
  };
  answer("Accept", (r) => r.acceptPk(e.link));
  answer("Decline", async (r) => {
    await r.declinePk(e.link);
    log(`you declined the PK with ${e.from}`, "sys");
  });
  list.append(box);
  list.hidden = false;
}

/** Drops the invitation boxes (the room was left). */
function clearPkInvites(): void {
  const list = $("pk-invites");
  list.replaceChildren();
  list.hidden = true;
}

/** The staff's tools: the seat mode and, in apply mode, the pending requests to answer. */
function renderStaff(staff: boolean, mode: "free" | "apply"): void {
  $("staff").hidden = !staff;
  if (!staff || !room) return;
  const r = room;
  const toggle = $<HTMLButtonElement>("seat-mode");
  toggle.textContent = mode === "apply" ? "Let members take seats" : "Make members ask for seats";
  toggle.dataset.mode = mode;
  toggle.onclick = () => run("seat-error", () => r.update({ seat_mode: mode === "apply" ? "free" : "apply" }));
  $("seat-mode-note").textContent = mode === "apply" ? "apply mode: members ask, staff approve" : "free mode: members take seats";
  const list = $("requests");
  list.replaceChildren();
  for (const [user, seat] of [...requests].sort()) {
    const li = el("li", `${user} asks for ${seat === null ? "any seat" : `seat #${seat}`} `);
    li.dataset.user = user;
    const answer = (label: string, f: () => Promise<unknown>) => {
      const b = el("button", label, "secondary");
      b.dataset.action = label.toLowerCase();
      b.onclick = () => run("seat-error", f);
      li.append(b);
    };
    answer("Approve", () => r.approveSeat(user));
    answer("Reject", () => r.rejectSeat(user));
    list.append(li);
  }
}

/** Staff read the pending requests when they arrive (events reach only those present). */
async function refreshRequests(): Promise<void> {
  const s = room?.snapshot;
  if (!room || !s || !(s.owner === me || s.admins.includes(me))) return;
  const { requests: pending } = await room.seatRequests();
  requests.clear();
  for (const q of pending) requests.set(q.user, q.seat);
  renderSeats();
}

function seatCard(seat: Seat, staff: boolean, apply: boolean): HTMLElement {
  const r = room!;
  const card = el("div", undefined, "seat" + (seat.user === me ? " mine" : ""));
  card.dataset.index = String(seat.index);
  card.dataset.user = seat.user ?? "";
  card.append(el("div", `#${seat.index}`, "flags"));
  card.append(el("div", seat.user ?? (seat.locked ? "🔒 locked" : "empty"), "who"));
  const flags = [seat.muted ? "muted" : "", seat.publishing ? "live" : "", seat.user && seat.locked ? "locked" : ""].filter(Boolean);
  card.append(el("div", flags.join(" · "), "flags"));
  const row = el("div");
  const btn = (label: string, f: () => Promise<unknown>, cls = "") => {
    const b = el("button", label, cls);
    b.dataset.action = label.toLowerCase();
    b.onclick = () => run("seat-error", f);
    row.append(b);
  };
  if (!seat.user && !seat.locked) {
    // In apply mode members ask; staff still take seats themselves.
    if (apply && !staff) btn("Ask", async () => {
      await r.requestSeat(seat.index);
      log(`you asked for seat #${seat.index}`, "sys");
    });
    else btn("Take", () => r.takeSeat(seat.index));
  }
  if (seat.user === me) {
    btn("Leave", () => r.leaveSeat(), "secondary");
    btn(seat.muted ? "Unmute" : "Mute", () => r.muteSeat(seat.index, !seat.muted), "secondary");
    btn(seat.publishing ? "Stop mic" : "Mic on", () => r.publishing(!seat.publishing), "secondary");
  } else if (staff) {
    if (seat.user) btn("Kick", () => r.kickFromSeat(seat.user!), "secondary");
    btn(seat.muted ? "Unmute" : "Mute", () => r.muteSeat(seat.index, !seat.muted), "secondary");
  }
  if (staff) btn(seat.locked ? "Unlock" : "Lock", () => r.lockSeat(seat.index, !seat.locked), "secondary");
  card.append(row);
  return card;
}

function renderMembers(): void {
  const list = $("members");
  list.replaceChildren(...[...members].sort().map(memberItem));
  $("members-count").textContent = String(room?.snapshot?.members ?? members.size);
  const to = $<HTMLSelectElement>("gift-to");
  const keep = to.value;
  to.replaceChildren();
  for (const u of [...members].filter((u) => u !== me).sort()) to.append(new Option(u, u));
  to.append(new Option("everyone seated", "seats"));
  if ([...to.options].some((o) => o.value === keep)) to.value = keep;
}

/** One member; staff get the moderation tools for plain members. */
function memberItem(u: string): HTMLElement {
  const li = el("li", u === me ? `${u} (you)` : u + (chatMuted.has(u) ? " (chat muted)" : ""));
  li.dataset.user = u;
  const s = room?.snapshot;
  const r = room;
  if (!s || !r || u === me || u === s.owner || s.admins.includes(u)) return li;
  if (!(s.owner === me || s.admins.includes(me))) return li;
  const btn = (label: string, f: () => Promise<unknown>) => {
    const b = el("button", label, "secondary");
    b.dataset.action = label.toLowerCase().replace(/ /g, "-");
    b.onclick = () => run("member-error", f);
    li.append(" ", b);
  };
  if (!s.seats.some((x) => x.user === u)) btn("Invite", () => r.inviteToSeat(u));
  if (chatMuted.has(u)) btn("Unmute chat", () => r.unmuteChat(u));
  else btn("Mute chat", () => r.muteChat(u));
  btn("Kick", () => r.kick(u));
  return li;
}

/** An invitation to a seat, with its answers, until answered. */
function showInvite(by: string, seat: number | null): void {
  const box = $("invite");
  box.replaceChildren(el("span", `${by} invites you to ${seat === null ? "a seat" : `seat #${seat}`} `));
  const answer = (label: string, f: () => Promise<unknown>) => {
    const b = el("button", label, label === "Accept" ? "" : "secondary");
    b.dataset.action = label.toLowerCase();
    b.onclick = () =>
      run("member-error", async () => {
        box.hidden = true;
        await f();
      });
    box.append(b, " ");
  };
  answer("Accept", () => room!.acceptSeatInvite());
  answer("Decline", () => room!.rejectSeatInvite());
  box.hidden = false;
}

async function refreshMembers(): Promise<void> {
  if (!room) return;
  const { members: list } = await room.members(undefined, 200);
  members.clear();
  for (const m of list) members.add(m.user);
  renderMembers();
}

async function refreshWallet(): Promise<void> {
  if (!client) return;
  const w = await client.balance();
  $("balance").textContent = String(w.balance);
  $("earnings").textContent = String(w.earnings);
}

function giftFx(gift: string, from: string, to: string[]): void {
  const fx = el("div", undefined, "fx");
  fx.textContent = EMOJI[gift] ?? "🎁";
  fx.append(el("small", `${from} → ${to.join(", ")}`));
  fx.style.left = `${15 + Math.random() * 60}%`;
  $("gift-fx").append(fx);
  setTimeout(() => fx.remove(), 2400);
}

/** A heart floating up for a like (`room.likes`, or an app's volatile custom `like`). */
function heartFx(from: string | undefined): void {
  const fx = el("div", "❤", "fx heart");
  fx.append(el("small", from ?? ""));
  fx.style.left = `${70 + Math.random() * 25}%`;
  $("gift-fx").append(fx);
  setTimeout(() => fx.remove(), 1800);
}

function renderGifts(): void {
  const box = $("gifts");
  box.replaceChildren();
  for (const g of gifts) {
    const b = el("button", `${EMOJI[g.id] ?? "🎁"} ${g.name} · ${g.price}`);
    b.dataset.gift = g.id;
    b.onclick = () =>
      run("gift-error", async () => {
        const target = $<HTMLSelectElement>("gift-to").value;
        if (!target) throw new Error("nobody to send to yet");
        const ok = await room!.sendGift(g.id, target === "seats" ? "seats" : [target]);
        $("balance").textContent = String(ok.balance);
      });
    box.append(b);
  }
}

function wire(r: Room): void {
  r.on("chat", (e) => chatLine(e));
  r.on("chat.recall", (e) => {
    const li = document.querySelector<HTMLElement>(`#chat-log li[data-seq="${e.line}"]`);
    if (!li) return;
    delete li.dataset.text;
    if (replying?.seq === e.line) stopReply();
    li.textContent = e.by === e.from ? `${e.from} recalled a message` : `${e.by} removed a message of ${e.from}`;
    li.className = "sys recalled";
  });
  r.on("chat.pin", () => renderSeats());
  // Likes come coalesced: one `room.likes` a second with what was added; a few hearts float
  // up for it, the first named after the latest liker.
  r.on("room.likes", (e) => {
    $("like-count").textContent = String(e.total);
    for (let i = 0; i < Math.min(e.added, 8); i++) heartFx(i === 0 ? e.recent[0] : undefined);
  });
  r.on("custom", (e) => {
    if (e.type === "like") heartFx(e.from);
    // The app backend's notices (POST /admin/rooms/{id}/messages with {"type":"notice","data":{"text":…}}).
    const text = (e.data as { text?: unknown } | undefined)?.text;
    if (e.system && e.type === "notice" && typeof text === "string") log(`📢 ${text}`, "sys");
  });
  r.on("seat.update", () => {
    renderSeats();
    renderMembers();
  });
  r.on("room.update", () => renderSeats());
  r.on("pk.start", (e) => {
    pkEnding = null;
    $("pk-result").textContent = "";
    if (e.vs) {
      // Matched by the app's backend, or an invitation accepted: the same start either way.
      log(`PK #${e.pk} against ${e.vs.room}: this room's gifts against theirs`, "sys");
      const link = e.vs.link;
      for (const b of [...$("pk-invites").children] as HTMLElement[]) if (b.dataset.link === link) b.remove();
      $("pk-invites").hidden = $("pk-invites").children.length === 0;
    }
    else log(`${e.by ?? "the platform"} started PK #${e.pk}: seats ${e.red_seats.join(", ")} against ${e.blue_seats.join(", ")}`, "sys");
    renderSeats();
  });
  r.on("pk.score", () => renderPk(false));
  // Invitations to a PK between rooms, and the answers to this room's: staff only.
  r.on("pk.invite", (e) => {
    log(`${e.from} invites this room to a PK (${e.by})`, "sys");
    showPkInvite(e);
  });
  r.on("pk.declined", (e) => log(`${e.vs} declined the PK`, "sys"));
  r.on("pk.end", (e) => {
    pkEnding = null;
    let text: string;
    if (e.vs) {
      // Against another room: red is this room, and both rooms announce the same scores.
      const outcome = e.winner === "draw" ? "a draw" : e.winner === "red" ? "this room won" : "this room lost";
      const top = e.red_top ? ` (this room's top sender ${e.red_top})` : "";
      text = `PK #${e.pk}: ${outcome} against ${e.vs.room}, ${e.red} to ${e.blue}${top}`;
    } else {
      const who = e.winner === "draw" ? "a draw" : `${e.winner} wins`;
      const tops = [e.red_top ? `red's top sender ${e.red_top}` : "", e.blue_top ? `blue's ${e.blue_top}` : ""].filter(Boolean).join(", ");
      text = `PK #${e.pk}: ${who}, ${e.red} to ${e.blue}${tops ? ` (${tops})` : ""}`;
    }
    $("pk-result").textContent = text;
    log(text, "sys");
    renderSeats();
  });
  r.on("room.role", (e) => {
    log(`${e.user} is now ${e.role}`, "sys");
    renderSeats();
    renderMembers();
    void refreshRequests().catch(() => {});
  });
  r.on("gift", (e) => {
    const name = gifts.find((g) => g.id === e.gift)?.name ?? e.gift;
    log(`${e.from} sent ${name} ×${e.count} to ${e.to.join(", ")}`, "gift");
    giftFx(e.gift, e.from, e.to);
    if (e.from === me || e.to.includes(me)) void refreshWallet().catch(() => {});
  });
  r.on("member.join", (e) => {
    members.add(e.user);
    log(`${e.user} joined`, "sys");
    renderMembers();
  });
  r.on("member.leave", (e) => {
    members.delete(e.user);
    log(`${e.user} left (${e.reason})`, "sys");
    renderMembers();
  });
  r.on("member.count", () => renderMembers());
  r.on("seat.request", (e) => {
    requests.set(e.user, e.seat);
    log(`${e.user} asks for a seat`, "sys");
    renderSeats();
  });
  r.on("seat.invite", (e) => {
    if (e.user === me) showInvite(e.by, e.seat);
  });
  r.on("seat.invite.update", (e) => log(`${e.user} ${e.state} the invitation`, "sys"));
  r.on("moderation", (e) => {
    if (e.action === "chat_mute" && e.user) chatMuted.add(e.user);
    if (e.action === "chat_unmute" && e.user) chatMuted.delete(e.user);
    if (e.user === me && e.action === "chat_mute") log("the staff muted your chat", "sys");
    if (e.user === me && e.action === "chat_unmute") log("you may chat again", "sys");
    renderMembers();
  });
  r.on("seat.request.update", (e) => {
    requests.delete(e.user);
    if (e.user === me) log(`your seat request was ${e.state}`, "sys");
    renderSeats();
  });
  // Every join and rejoin (resumed or resynced) brings the snapshot: the seats, the chat rules
  // and the pinned line are drawn again from it.
  r.on("snapshot", (s) => {
    $("room-title").textContent = s.title;
    $("like-count").textContent = String(s.likes ?? 0);
    renderSeats();
  });
  r.on("rejoining", (e) => log(`rejoining (${e.reason})…`, "sys"));
  r.on("resumed", (e) => {
    setConn("resumed", e.resync ? "resumed (resynced)" : "resumed");
    if (e.resync) stopReply(); // its seq belonged to the chat that is gone
    log(e.resync ? "resumed: the room was reloaded, missed chat is gone" : "resumed: nothing missed", "sys");
    void refreshMembers().catch(() => {});
    void refreshWallet().catch(() => {});
    void refreshRequests().catch(() => {});
  });
  r.on("left", (e) => {
    clearPkInvites();
    log(`you left the room (${e.reason})`, "sys");
    setConn("closed", `left: ${e.reason}`);
  });
}

async function join(): Promise<void> {
  const user = $<HTMLInputElement>("user").value.trim();
  const roomId = $<HTMLInputElement>("room").value.trim() || "lobby";
  const pasted = $<HTMLTextAreaElement>("token").value.trim();
  if (!user && !pasted) throw new Error("pick a user name");
  const token = pasted ? pasted : () => fetchToken(user);
  if (!pasted) await fetchToken(user); // fail early on a bad name
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;
  // A previous attempt that failed (a refused token, a locked or closed room) is closed, not
  // left reconnecting beside this one.
  client?.close();
  const c = new Client({ url, token, reconnect: { initialMs: 300, maxMs: 5000 } });
  client = c;
  try {
    await enter(c, user, pasted, roomId);
  } catch (e) {
    c.close();
    if (client === c) client = null;
    throw e;
  }
}

async function enter(c: Client, user: string, pasted: string, roomId: string): Promise<void> {
  c.on("state", (s) => {
    if (s.state === "open") setConn("open", "connected");
    else if (s.state === "reconnecting") setConn("reconnecting", `reconnecting${s.delayMs !== undefined ? ` (in ${(s.delayMs / 1000).toFixed(1)} s)` : ""}…`);
    else setConn(s.state, s.state + (s.reason ? `: ${s.reason}` : ""));
  });
  // While the node is unreachable the token fetches fail too: the badge says enough then.
  c.on("error", (e) => {
    if (c.state === "open") log(`error: ${e.message}`, "sys");
  });
  // A browser cannot tell a refused token from a node that is down: give up after a while.
  c.connect().catch(() => {});
  await c.waitOpen(15_000);
  me = pasted ? JSON.parse(atob(pasted.split(".")[1]!.replace(/-/g, "+").replace(/_/g, "/"))).sub : user;
  gifts = (await c.gifts()).gifts;
  const r = await c.join(roomId);
  room = r;
  wire(r);
  $("login").hidden = true;
  $("app").hidden = false;
  $("room-name").textContent = roomId;
  $("me").textContent = me;
  $("room-title").textContent = r.snapshot?.title ?? "";
  $("like-count").textContent = String(r.snapshot?.likes ?? 0);
  renderSeats();
  renderGifts();
  await Promise.all([refreshMembers(), refreshWallet(), refreshRequests()]);
  log(`joined ${roomId} as ${me}`, "sys");
}

async function main(): Promise<void> {
  const params = new URLSearchParams(location.search);
  if (params.get("user")) $<HTMLInputElement>("user").value = params.get("user")!;
  if (params.get("room")) $<HTMLInputElement>("room").value = params.get("room")!;
  const demo = await demoTokens();
  $("demo-note").textContent = demo
    ? "Demo mode: this node gives a token (and 1000 demo coins) to any user name."
    : "Demo tokens are off on this node: paste a token (chorus token --user NAME), or start the node with --demo.";
  $("token-label").hidden = demo;
  $("join").onclick = () => run("login-error", join);
  $("chat-form").onsubmit = (ev) => {
    ev.preventDefault();
    const input = $<HTMLInputElement>("chat-input");
    const text = input.value.trim();
    if (!text || !room) return;
    const reply = replying;
    void run("chat-error", async () => {
      const mentions = mentionsOf(text, reply);
      // The staff's line that starts with "@all" mentions everyone (sent as typed); from a
      // member "@all" is just text (the server would refuse mention_all: FORBIDDEN).
      const s = room!.snapshot;
      const mentionAll = !!s && (s.owner === me || s.admins.includes(me)) && /^@all(\s|$)/.test(text);
      await room!.chat(text, { mentions, replyTo: reply?.seq, mentionAll });
      input.value = "";
      if (replying === reply) stopReply();
    });
  };
  $("chat-replying-cancel").onclick = () => stopReply();
  $("pk-invite-form").onsubmit = (ev) => {
    ev.preventDefault();
    void invitePk();
  };
  $("chat-unpin").onclick = () => {
    if (room) void run("chat-error", () => room!.pinChat(null));
  };
  $("like").onclick = () => {
    if (room)
      void run("chat-error", async () => {
        $("like-count").textContent = String((await room!.like()).total);
      });
  };
  // The PK's time left ticks between its score events.
  setInterval(() => {
    if (room?.snapshot?.pk) renderPk(false);
  }, 1000);
  if (params.get("user") && demo) void run("login-error", join);
}

void main();
