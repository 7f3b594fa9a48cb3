#!/usr/bin/env bash
# Builds the deb and rpm packages of gshare from a `dist` build (Cargo.toml: release + fat LTO):
#   ./hack/package.sh            -> $CARGO_TARGET_DIR/packages/gshare_<v>_<arch>.deb and gshare-<v>.<arch>.rpm
# Installs cargo-deb and cargo-generate-rpm (crates.io) when missing. The dist build (fat LTO, one
# codegen unit) takes several minutes on a small machine. Then lists what each package installs.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/gshare/target}"
out="$CARGO_TARGET_DIR/packages"
mkdir -p "$out"

command -v cargo-deb >/dev/null || cargo install --locked cargo-deb
command -v cargo-generate-rpm >/dev/null || cargo install --locked cargo-generate-rpm

# Linked with identical code folding (lld's --icf=all: 0.2 MiB of monomorphised copies) where
# rustc links with lld (x86_64 Linux since Rust 1.90); passed to the binary's own link only, so
# the dependencies' builds are shared with plain `cargo build --profile dist`.
case "$(rustc -vV | sed -n 's/^host: //p')" in
    x86_64-unknown-linux-gnu) cargo rustc --profile dist --locked -p gshare --bin gshare -- -C link-arg=-Wl,--icf=all ;;
    *) cargo build --profile dist --locked -p gshare --bin gshare ;;
esac
# The size budget (packaging/size-budget, bytes): reported against its target, failed over its ceiling.
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
# Both tools read the asset target/dist/gshare from $CARGO_TARGET_DIR/dist/.

cargo deb --no-build --locked --profile dist -p gshare -o "$out"
cargo generate-rpm --profile dist -p . -o "$out"

for deb in "$out"/*.deb; do
    echo "== $deb"
    dpkg-deb --info "$deb" | sed -n '/Package:/,$p'
    dpkg-deb --contents "$deb"
    # No error and no warning; the intended exceptions are overridden, with reasons, in
    # packaging/lintian/gshare (installed as /usr/share/lintian/overrides/gshare).
    if command -v lintian >/dev/null; then
        echo "== lintian $deb"
        lintian --fail-on error,warning "$deb"
        # The overrides in force (with --show-overrides lintian itself exits 2 even when clean,
        # so they are listed by a second, informational run).
        lintian --show-overrides "$deb" 2>/dev/null | grep '^O:' || true
    else
        echo "lintian is not installed (apt-get install lintian): the .deb was not checked" >&2
    fi
done
ls -l "$out"
