// The console's API types: src/api/schema.d.ts is what openapi-typescript makes of the server's
// document as committed in src/api/openapi.json (free-form objects as Record<string, unknown>,
// not openapi-typescript's default Record<string, never>; the Rust test
// `schema::the_consoles_openapi_snapshot_is_the_served_document` holds that to the served one).
//
//   node scripts/api-types.mjs          writes schema.d.ts
//   node scripts/api-types.mjs --check  fails, saying what to run, when schema.d.ts is not that
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const web = join(dirname(fileURLToPath(import.meta.url)), "..");
const doc = join(web, "src/api/openapi.json");
const types = join(web, "src/api/schema.d.ts");
const cli = join(web, "node_modules/openapi-typescript/bin/cli.js");
const generate = (out) =>
  execFileSync(process.execPath, [cli, doc, "--empty-objects-unknown", "--output", out], { stdio: ["ignore", "ignore", "inherit"] });

if (!process.argv.includes("--check")) {
  generate(types);
} else {
  const dir = mkdtempSync(join(tmpdir(), "gshare-api-types-"));
  try {
    const fresh = join(dir, "schema.d.ts");
    generate(fresh);
    let committed = "";
    try {
      committed = readFileSync(types, "utf8");
    } catch {
      // Missing: reported below like a stale one.
    }
    if (readFileSync(fresh, "utf8") !== committed) {
      console.error("src/api/schema.d.ts is not what openapi-typescript makes of src/api/openapi.json; run `npm run api:types`");
      process.exit(1);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
