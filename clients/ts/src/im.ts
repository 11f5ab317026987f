// Acknowledged direct messages (protocol section 13.7): the client deduplicates `im` events
// by id and acknowledges them in batches, so a message reaches the application once even when
// the server sends it again after a dropped connection.

/** Most ids one `im.ack` carries (section 9). */
export const MAX_IM_ACK_IDS = 200;

/** How many recent message ids the client remembers to drop duplicates. */
const SEEN_IDS = 2_000;

/**
 * What the client remembers of direct messages: the ids it handed to the application (a
 * bounded set, oldest forgotten first) and the ids it still has to acknowledge.
 */
export class ImInbox {
  private readonly seen = new Set<number>();
  private readonly order: number[] = [];
  private owed: number[] = [];

  /** Records message `id`; false when it was seen before (a duplicate to drop). */
  take(id: number): boolean {
    if (this.seen.has(id)) return false;
    this.seen.add(id);
    this.order.push(id);
    if (this.order.length > SEEN_IDS) this.seen.delete(this.order.shift()!);
    return true;
  }

  /** `id` is to be acknowledged (again, for a duplicate: its first acknowledgement may be lost). */
  owe(id: number): void {
    if (!this.owed.includes(id)) this.owed.push(id);
  }

  /** Whether acknowledgements wait. */
  get owing(): boolean {
    return this.owed.length > 0;
  }

  /** The next batch to acknowledge (at most 200 ids), taken out. */
  batch(): number[] {
    const b = this.owed.slice(0, MAX_IM_ACK_IDS);
    this.owed = this.owed.slice(b.length);
    return b;
  }

  /** A batch whose acknowledgement failed goes back (the server may send them again anyway). */
  giveBack(ids: number[]): void {
    for (const id of ids) this.owe(id);
  }
}
