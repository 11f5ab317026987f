// Test helpers: a real standalone Chorus node on free ports, its tokens and admin API.
// The binary is $CHORUS_BIN (what .ci/test-all builds), else target/debug/chorus of the
// repository (built with `cargo build --bin chorus` when missing).
import { spawn, execFileSync } from "node:child_process";
import { createHmac, randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before } from "node:test";
import WebSocket from "ws";
import { Client } from "../dist/index.js";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

export function chorusBin() {
  if (process.env.CHORUS_BIN) return process.env.CHORUS_BIN;
  const target = process.env.CARGO_TARGET_DIR ?? join(repo, "target");
  const bin = join(target, "debug/chorus");
  if (!existsSync(bin)) execFileSync("cargo", ["build", "--bin", "chorus"], { cwd: repo, stdio: "inherit" });
  return bin;
}

const b64 = (v) => Buffer.from(typeof v === "string" ? v : JSON.stringify(v)).toString("base64url");

/** An HS256 token for `user` signed with `secret`, living `ttlS` seconds. */
export function mint(secret, user, ttlS = 3600, claims = {}) {
  const now = Math.floor(Date.now() / 1000);
  const head = b64({ alg: "HS256", typ: "JWT" });
  const body = b64({ sub: user, iat: now, exp: now + ttlS, ...claims });
  const sig = createHmac("sha256", secret).update(`${head}.${body}`).digest("base64url");
  return `${head}.${body}.${sig}`;
}

/**
 * Starts a standalone node. `opts.args` are extra flags; `opts.ws` / `opts.admin` fixed
 * addresses (a restart reuses them); `opts.dataDir` a data dir to reuse.
 */
export async function startNode(opts = {}) {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), "chorus-ts-"));
  const secret = opts.secret ?? randomBytes(16).toString("hex");
  const adminToken = opts.adminToken ?? randomBytes(16).toString("hex");
  const env = {
    ...process.env,
    CHORUS_JWT_SECRET: secret,
    CHORUS_ADMIN_TOKEN: adminToken,
    CHORUS_LUCKY_SECRET: "test-lucky-secret",
    CHORUS_LOG: process.env.CHORUS_LOG ?? "warn",
  };
  const args = [
    "--data-dir", dataDir,
    "--ws-addr", opts.ws ?? "127.0.0.1:0",
    "--admin-addr", opts.admin ?? "127.0.0.1:0",
    ...(opts.args ?? []),
  ];
  const child = spawn(opts.bin ?? chorusBin(), args, { env, stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (b) => {
    stderr = (stderr + b).slice(-20_000);
    if (process.env.CHORUS_TEST_VERBOSE) process.stderr.write(b);
  });
  let ready;
  try {
    ready = await new Promise((resolveReady, reject) => {
      let out = "";
      const timer = setTimeout(() => reject(new Error(`node not ready in 30 s:\n${stderr}`)), 30_000);
      child.stdout.on("data", (b) => {
        out += b;
        const m = /CHORUS_READY ws=(\S+) admin=(\S+)/.exec(out);
        if (m) {
          clearTimeout(timer);
          resolveReady({ ws: m[1], admin: m[2] });
        }
      });
      child.on("error", (e) => {
        clearTimeout(timer);
        reject(new Error(`node could not be started: ${e.message}`));
      });
      child.on("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`node exited ${code} before ready:\n${stderr}`));
      });
    });
  } catch (e) {
    // A node that never became ready must not outlive the test (holding its ports, writing
    // its data dir): kill it and wait for it, then remove the data dir unless it was given.
    if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
      const gone = new Promise((r) => child.once("exit", r));
      child.kill("SIGKILL");
      await gone;
    }
    if (!opts.dataDir) rmSync(dataDir, { recursive: true, force: true });
    throw e;
  }
  const node = {
    ws: ready.ws,
    adminAddr: ready.admin,
    child,
    dataDir,
    secret,
    adminToken,
    url: `ws://${ready.ws}/ws`,
    http: `http://${ready.ws}`,
    token: (user, ttlS, claims) => mint(secret, user, ttlS, claims),
    stderr: () => stderr,
    /** Calls the admin API; resolves with {status, body}. */
    async admin(method, path, body) {
      const r = await fetch(`http://${ready.admin}${path}`, {
        method,
        headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
      const text = await r.text();
      let json;
      try {
        json = JSON.parse(text);
      } catch {
        json = text;
      }
      return { status: r.status, body: json };
    },
    /** SIGTERM (the node closes its sockets with 1001), waiting at most 20 s for the exit. */
    async stop(signal = "SIGTERM") {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const gone = new Promise((r) => child.once("exit", r));
      child.kill(signal);
      const t = setTimeout(() => child.kill("SIGKILL"), 20_000);
      await gone;
      clearTimeout(t);
    },
    /** Stops the node and removes its data dir (unless it was given). */
    async cleanup() {
      await node.stop("SIGKILL");
      if (!opts.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return node;
}

/** Waits until `cond()` is truthy, polling every 20 ms, at most `ms`. */
export async function until(cond, ms = 10_000, what = "condition") {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * One node for a test file: started before its tests, stopped after them with every client
 * made through `client(user, opts)` (or pushed to `clients`). `reconnect` is the clients'
 * default backoff.
 */
export function useNode(reconnect) {
  const fx = { node: undefined, clients: [] };
  fx.client = (user, opts = {}) => {
    const c = new Client({ url: fx.node.url, token: fx.node.token(user), WebSocket, reconnect, ...opts });
    fx.clients.push(c);
    return c;
  };
  before(async () => {
    fx.node = await startNode();
  });
  after(async () => {
    for (const c of fx.clients) c.close();
    await fx.node?.cleanup();
  });
  return fx;
}
