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
        // A listener's bug must not break the emitter's caller (the connection's read loop, a
        // reconnect timer): it is reported, never thrown again (a rethrow from a timer would be
        // an uncaught exception, which ends a Node process).
        this.listenerFailed(new ListenerError(String(name), e));
      }
    }
  }

  /** Whether `name` has listeners. */
  protected listening<K extends keyof M>(name: K): boolean {
    return (this.listeners.get(name)?.size ?? 0) > 0;
  }

  /**
   * A listener threw: reports it with `console.error`. The client and its rooms emit it as the
   * client's `error` event instead when the application listens to that.
   */
  protected listenerFailed(e: ListenerError): void {
    reportError(e);
  }
}

/** An exception thrown by an event listener: which event, and the exception as `cause`. */
export class ListenerError extends Error {
  readonly event: string;
  constructor(event: string, cause: unknown) {
    super(`a "${event}" listener threw: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = "ListenerError";
    this.event = event;
  }
}

/** The last resort for an error nobody listens to: the console, where there is one. */
export function reportError(e: unknown): void {
  (globalThis as { console?: { error?: (...a: unknown[]) => void } }).console?.error?.(e);
}
