#!/usr/bin/env bash
# After the server's API changed: rewrite the console's snapshot of the OpenAPI document from the
# server itself (the Rust test, in-process, no port), then the types generated from it. Uses
# $CARGO_TARGET_DIR like the rest of the build.
set -euo pipefail
cd "$(dirname "$0")/../.."
GSHARE_UPDATE_OPENAPI=1 cargo test --locked --test it openapi_snapshot
cd web && node scripts/api-types.mjs
git status --short -- src/api
