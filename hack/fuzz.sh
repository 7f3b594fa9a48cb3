#!/usr/bin/env bash
# Runs the cargo-fuzz targets of fuzz/ (entry points: src/fuzzing.rs) and prints, per target, the
# wall seconds, the executions and their rate, libFuzzer's coverage (cov, ft) and corpus size at the
# end, and whether it crashed:
#   ./hack/fuzz.sh                  -> every target for FUZZ_SECONDS (default 20) each
#   ./hack/fuzz.sh jwt 600          -> one target for 600 s
# Targets: kubeconfig jwt internal_body hami_node verify_uri set_cookie relay_headers. New corpus entries go to
# fuzz/corpus/<target>/ (not committed; fuzz/seeds/<target>/ are); a crashing input is written to
# fuzz/artifacts/<target>/ and reproduces with `cargo fuzz run <target> <file>` (same env as here).
# cargo-fuzz is installed from crates.io when missing; libFuzzer's instrumentation flags are
# nightly-only, so the stable toolchain builds with RUSTC_BOOTSTRAP=1. No sanitizer (the crate
# forbids unsafe code; panics, overflows (debug assertions on), OOMs and hangs are the findings).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
export RUSTC_BOOTSTRAP=1
# Its own build directory: instrumented builds share nothing with the normal ones.
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:-$HOME/.cache/gshare/target}-fuzz}"
# The console is not fuzzed: a one-page stand-in keeps build.rs from running npm.
mkdir -p "$CARGO_TARGET_DIR/web-stub"
[ -f "$CARGO_TARGET_DIR/web-stub/index.html" ] || echo '<!doctype html><title>fuzz</title>' >"$CARGO_TARGET_DIR/web-stub/index.html"
export GSHARE_WEB_DIST="$CARGO_TARGET_DIR/web-stub"

all=(kubeconfig jwt internal_body hami_node verify_uri set_cookie relay_headers)
seconds="${FUZZ_SECONDS:-20}"
if [ $# -ge 1 ]; then
    targets=("$1")
    seconds="${2:-$seconds}"
else
    targets=("${all[@]}")
fi
flags=(-s none --debug-assertions)
if [ ${#targets[@]} -eq 1 ]; then cargo fuzz build "${flags[@]}" "${targets[0]}"; else cargo fuzz build "${flags[@]}"; fi

failed=0
summary=()
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
    log="fuzz/artifacts/$t/last-run.log"
    max_len=4096
    [ "$t" = kubeconfig ] && max_len=16384
    started=$(date +%s)
    set +e
    cargo fuzz run "${flags[@]}" "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
        -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 >"$log" 2>&1
    rc=$?
    set -e
    wall=$(($(date +%s) - started))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    # libFuzzer's last status line: "#N DONE cov: C ft: F corp: U/SIZE ... exec/s: E rss: R".
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -oE '(cov|ft|corp|rss): [^ ]+' | tr '\n' ' ' | sed 's/ $//')
    line="$t: ${seconds}s asked, ${wall}s wall, ${execs:-?} executions (${rate:-?}/s), ${last:-no status line}"
    echo "== $line (exit $rc)" >&2
    if [ "$rc" -ne 0 ]; then
        failed=1
        summary+=("$line, CRASHED (exit $rc): see $log and fuzz/artifacts/$t/")
        tail -40 "$log" >&2
    else
        summary+=("$line, 0 crashes")
    fi
done
echo "== fuzz summary"
printf '%s\n' "${summary[@]}"
exit "$failed"
