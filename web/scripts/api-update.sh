#!/usr/bin/env bash
# After the server's API changed: rewrite the console's snapshot of the OpenAPI document from the
# handlers (the Rust test, in-process), then the types generated from it (the server embeds the
# file when it is built, so rebuild before serving). Uses
# $CARGO_TARGET_DIR like the rest of the build.
set -euo pipefail
cd "$(dirname "$0")/../.."
GSHARE_UPDATE_OPENAPI=1 cargo test --locked --test it openapi_snapshot
cd web && node scripts/api-types.mjs
git status --short -- src/api
