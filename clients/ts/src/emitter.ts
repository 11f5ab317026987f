/** A small typed event emitter: `on` returns the function that removes the listener. */
export class Emitter<M extends { [K in keyof M]: unknown }> {
  private listeners = new Map<keyof M, Set<(v: never) => void>>();

  /** Calls `fn` for every `name` event until the returned function is called. */
  on<K extends keyof M>(name: K, fn: (v: M[K]) => void): () => void {
    let set = this.listeners.get(name);
    if (!set) {
      set = new Set();
      this.listeners.set(name, set);
    }
    set.add(fn as (v: never) => void);
    return () => this.off(name, fn);
  }

  /** Calls `fn` for the next `name` event only. */
  once<K extends keyof M>(name: K, fn: (v: M[K]) => void): () => void {
    const off = this.on(name, (v) => {
      off();
      fn(v);
    });
    return off;
  }

  off<K extends keyof M>(name: K, fn: (v: M[K]) => void): void {
    this.listeners.get(name)?.delete(fn as (v: never) => void);
  }

  /** Resolves with the next `name` event that `pred` accepts, or rejects after `timeoutMs`. */
  next<K extends keyof M>(name: K, pred: (v: M[K]) => boolean = () => true, timeoutMs = 10_000): Promise<M[K]> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        off();
        reject(new Error(`no ${String(name)} event within ${timeoutMs} ms`));
      }, timeoutMs);
      const off = this.on(name, (v) => {
        if (!pred(v)) return;
        clearTimeout(timer);
        off();
        resolve(v);
      });
    });
  }

  protected emit<K extends keyof M>(name: K, v: M[K]): void {
    const set = this.listeners.get(name);
    if (!set) return;
    for (const fn of [...set]) {
      try {
        (fn as (v: M[K]) => void)(v);
      } catch (e) {
        // A listener's bug must not break the connection's read loop.
        setTimeout(() => {
          throw e;
        });
      }
    }
  }
}
