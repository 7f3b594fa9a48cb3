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

# The dist binary, checked against its size budget.
./hack/size.sh
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
