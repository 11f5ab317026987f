// Builds the package (dist/: ESM bundle + type declarations) and, with `--web DIR`, the
// browser pages the node serves (the demo room and the operator dashboard) into DIR.
// The pages are committed under gateway/web/ and embedded in the binary; CI rebuilds them
// with `node build.mjs --web <tmp>` and fails when they differ from the committed ones.
import { build } from "esbuild";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);

if (!args.includes("--web-only")) {
  rmSync(join(here, "dist"), { recursive: true, force: true });
  await build({
    entryPoints: [join(here, "src/index.ts")],
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    external: ["ws"],
    outfile: join(here, "dist/index.js"),
    logLevel: "warning",
  });
  execFileSync(process.execPath, [join(here, "node_modules/typescript/bin/tsc"), "-p", join(here, "tsconfig.json")], {
    stdio: "inherit",
  });
}

const web = args.indexOf("--web");
if (web >= 0) {
  const out = args[web + 1];
  if (!out) throw new Error("--web needs a directory");
  mkdirSync(out, { recursive: true });
  for (const page of ["demo", "dashboard"]) {
    await build({
      entryPoints: [join(here, `web/${page}.ts`)],
      bundle: true,
      minify: true,
      format: "iife",
      platform: "browser",
      target: "es2020",
      external: ["ws"],
      legalComments: "none",
      outfile: join(out, `${page}.js`),
      logLevel: "warning",
    });
    copyFileSync(join(here, `web/${page}.html`), join(out, `${page}.html`));
  }
  copyFileSync(join(here, "web/chorus.css"), join(out, "chorus.css"));
}
