import type { ClientErrorCode, ErrorCode } from "./types.js";

/** An error answer (`err` of a reply, section 3.2) or a client-side failure of a request. */
export class ChorusError extends Error {
  /**
   * The protocol's error code (section 10), or one of the client's own: `TIMEOUT` (no reply in
   * time), `DISCONNECTED` (the connection closed before the reply), `CLOSED` (the client was
   * closed).
   */
  readonly code: ErrorCode | ClientErrorCode | (string & {});
  readonly op: string;
  /**
   * The idempotency key (`req_id`) of the request that failed, when it has one (`gift.send`,
   * `wallet.transfer`, `im.send`, `guard.buy`), also when the client made it: sent again with
   * this key, the request takes effect at most once (section 6.1).
   */
  reqId?: string;

  constructor(code: string, message: string, op = "", reqId?: string) {
    super(`${op ? op + ": " : ""}${code}: ${message}`);
    this.name = "ChorusError";
    this.code = code;
    this.op = op;
    if (reqId !== undefined) this.reqId = reqId;
  }

  /** Whether the same request may succeed later (section 10's "retryable"). */
  get retryable(): boolean {
    return RETRYABLE.has(this.code);
  }
}

const RETRYABLE = new Set(["UNAVAILABLE", "INTERNAL", "RATE_LIMITED", "TIMEOUT", "DISCONNECTED"]);

/**
 * Errors of requests that were never sent (they waited for a room's rejoin, which failed): they
 * say nothing of what an earlier attempt of the same request did.
 */
export const notSent = new WeakSet<Error>();

/** `p`, whose `ChorusError` rejection carries `reqId` (the key of the request it made). */
export async function keyed<T>(p: Promise<T>, reqId: string): Promise<T> {
  try {
    return await p;
  } catch (e) {
    if (e instanceof ChorusError) e.reqId = reqId;
    throw e;
  }
}

/** A UUIDv7 (time-ordered), the recommended `gift.send` `req_id` (section 6.1). */
export function uuidv7(now = Date.now()): string {
  const b = new Uint8Array(16);
  const c = (globalThis as { crypto?: { getRandomValues(a: Uint8Array): Uint8Array } }).crypto;
  if (c) c.getRandomValues(b);
  else for (let i = 0; i < 16; i++) b[i] = Math.floor(Math.random() * 256);
  let ms = now;
  for (let i = 5; i >= 0; i--) {
    b[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  b[6] = (b[6]! & 0x0f) | 0x70;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/**
 * Backoff with jitter: attempt 0 waits about `initialMs`, each later attempt up to twice as
 * long, capped at `maxMs`; the wait is drawn from the upper half of the window so that many
 * clients dropped at once spread out without reconnecting instantly.
 */
export function backoff(attempt: number, initialMs: number, maxMs: number, rand = Math.random): number {
  const cap = Math.min(maxMs, initialMs * 2 ** Math.min(attempt, 20));
  return Math.round(cap / 2 + rand() * (cap / 2));
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
