// Browser helpers: Debian's Chromium (or $CHROMIUM) driven by playwright-core, which
// downloads nothing; screenshots go to $CHORUS_ARTIFACTS (default a fresh temp dir).
import { mkdirSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

export const artifacts = (() => {
  const dir = process.env.CHORUS_ARTIFACTS ? join(process.env.CHORUS_ARTIFACTS, "browser") : mkdtempSync(join(tmpdir(), "chorus-browser-"));
  mkdirSync(dir, { recursive: true });
  return dir;
})();

export async function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--disable-dev-shm-usage",
    ],
  });
}

/** Writes a full-page screenshot and prints its path. */
export async function shot(page, name) {
  const path = join(artifacts, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  console.log(`screenshot: ${path}`);
  return path;
}
