#!/usr/bin/env bash
# The dist binary and its size budget (issue "Edge footprint"): builds `$CARGO_TARGET_DIR/dist/gshare`
# (Cargo.toml's dist profile: release + fat LTO, one codegen unit) and checks its size against
# packaging/size-budget: reported against the target, failed over the ceiling. Run by
# hack/package.sh before packaging and by .ci/run (in the background, with a target directory of
# its own: a dist build after a change takes ~14 min on two cores, ~17 min cold).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/gshare/target}"

# Linked with identical code folding (lld's --icf=all: 0.2 MiB of monomorphised copies) where
# rustc links with lld (x86_64 Linux since Rust 1.90); passed to the binary's own link only, so
# the dependencies' builds are shared with plain `cargo build --profile dist`.
case "$(rustc -vV | sed -n 's/^host: //p')" in
    x86_64-unknown-linux-gnu) cargo rustc --profile dist --locked -p gshare --bin gshare -- -C link-arg=-Wl,--icf=all ;;
    *) cargo build --profile dist --locked -p gshare --bin gshare ;;
esac
target=$(awk '$1 == "target" {print $2}' packaging/size-budget)
ceiling=$(awk '$1 == "ceiling" {print $2}' packaging/size-budget)
size=$(stat -c %s "$CARGO_TARGET_DIR/dist/gshare")
awk -v s="$size" -v t="$target" -v c="$ceiling" 'BEGIN {printf "dist binary: %d bytes = %.2f MiB; target %.2f MiB (%.1f %%), ceiling %.2f MiB\n", s, s / 1048576, t / 1048576, 100 * s / t, c / 1048576}'
if [ "$size" -gt "$ceiling" ]; then
    echo "the dist binary is $((size - ceiling)) bytes over its ceiling (packaging/size-budget)" >&2
    exit 1
elif [ "$size" -gt "$target" ]; then
    echo "warning: the dist binary is $((size - target)) bytes over its $((target / 1048576)) MiB target (packaging/size-budget)" >&2
fi
