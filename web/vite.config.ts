// Vite builds the console into dist/ (index.html + content-hashed files under assets/), which the
// gshare binary embeds (build.rs, src/console.rs). No inline scripts: the server's CSP forbids them.
import { defineConfig } from "vitest/config";

export default defineConfig({
  base: "/",
  build: {
    outDir: "dist",
    assetsDir: "assets",
    target: "es2022",
    sourcemap: false,
    // Never inline assets as data: URIs into JS/CSS; keeps the CSP simple and caching per file.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    reportCompressedSize: true,
  },
  oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
  server: {
    // `npm run dev` against a running `gshare serve`.
    proxy: { "/api": "http://127.0.0.1:8080" },
  },
  test: {
    environment: "happy-dom",
    globals: true,
    include: ["src/**/*.test.{ts,tsx}"],
    // The stylesheet as text (`styles.css?raw`): a test computes contrast ratios from its colours.
    css: { include: [/styles\.css/] },
  },
});
