// A real cluster for browser tests: a throwaway redis-server, shards and a gateway, each a
// `chorus` process on free ports, sharing one SQLite ledger file.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chorusBin, mint, until } from "./node.mjs";

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function redisPing(port) {
  return new Promise((resolve) => {
    const sock = connect(port, "127.0.0.1");
    let got = "";
    sock.setTimeout(1000, () => {
      sock.destroy();
      resolve(false);
    });
    sock.on("error", () => resolve(false));
    sock.on("connect", () => sock.write("PING\r\n"));
    sock.on("data", (b) => {
      got += b;
      if (got.includes("PONG")) {
        sock.destroy();
        resolve(true);
      }
    });
  });
}

function startProcess(bin, args, env, name) {
  const child = spawn(bin, args, { env, stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (b) => {
    stderr = (stderr + b).slice(-20_000);
    if (process.env.CHORUS_TEST_VERBOSE) process.stderr.write(`[${name}] ${b}`);
  });
  const ready = new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`${name} not ready in 30 s:\n${stderr}`)), 30_000);
    child.stdout.on("data", (b) => {
      out += b;
      const m = /CHORUS_READY ws=(\S+) admin=(\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ addr: m[1], admin: m[2] });
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited ${code}:\n${stderr}`));
    });
  });
  return { child, ready, stderr: () => stderr };
}

/** Starts redis, shards `s1..sN` and gateway `g1`; `stop()` ends them all. */
export async function startCluster({ shards = 2 } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "chorus-ts-cluster-"));
  const procs = [];
  const stop = async () => {
    for (const p of procs.reverse()) {
      if (p.child.exitCode === null && p.child.signalCode === null) {
        const gone = new Promise((r) => p.child.once("exit", r));
        p.child.kill("SIGKILL");
        await gone;
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const redisPort = await freePort();
    const redis = { child: spawn("redis-server", ["--port", String(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir], { stdio: "ignore" }) };
    procs.push(redis);
    await until(() => redisPing(redisPort), 10_000, "redis-server");
    const secret = randomBytes(16).toString("hex");
    const adminToken = randomBytes(16).toString("hex");
    const env = {
      ...process.env,
      CHORUS_JWT_SECRET: secret,
      CHORUS_ADMIN_TOKEN: adminToken,
      CHORUS_CLUSTER_SECRET: randomBytes(16).toString("hex"),
      CHORUS_LUCKY_SECRET: "cluster-lucky-secret",
      CHORUS_LEDGER: `sqlite://${join(dir, "ledger.db")}`,
      CHORUS_LOG: process.env.CHORUS_LOG ?? "warn",
    };
    const redisUrl = `redis://127.0.0.1:${redisPort}`;
    const bin = chorusBin();
    const shardNodes = [];
    for (let i = 1; i <= shards; i++) {
      const p = startProcess(bin, ["shard", "--node-id", `s${i}`, "--redis", redisUrl, "--link-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"], env, `s${i}`);
      procs.push(p);
      shardNodes.push({ id: `s${i}`, ...(await p.ready) });
    }
    const g = startProcess(bin, ["gateway", "--node-id", "g1", "--redis", redisUrl, "--ws-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"], env, "g1");
    procs.push(g);
    const gw = await g.ready;
    const cluster = {
      shards: shardNodes,
      gateway: { url: `ws://${gw.addr}/ws`, admin: gw.admin },
      adminToken,
      token: (user, ttlS) => mint(secret, user, ttlS),
      stop,
      async admin(method, path, body) {
        const r = await fetch(`http://${gw.admin}${path}`, {
          method,
          headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
          ...(body ? { body: JSON.stringify(body) } : {}),
        });
        return { status: r.status, body: await r.json().catch(() => null) };
      },
    };
    // Ready when the gateway sees both shards live in the ring.
    await until(async () => {
      const r = await cluster.admin("GET", "/admin/nodes");
      return r.status === 200 && r.body.nodes.filter((n) => n.role === "shard" && n.health === "live").length === shards;
    }, 20_000, "both shards live");
    return cluster;
  } catch (e) {
    await stop();
    throw e;
  }
}
