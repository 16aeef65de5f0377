#!/usr/bin/env bash
# CI smoke of the fuzz targets (README.md): builds every target, then runs each for a few
# seconds on its committed seeds, with the limits of a real run. A crash, a broken property, a
# leak past the memory limit or an input slower than the timeout fails the script.
#
#   fuzz/smoke.sh                    # 5 s per target
#   FUZZ_SMOKE_SECS=30 fuzz/smoke.sh
#
# Needs a nightly toolchain (rustup toolchain install nightly); installs cargo-fuzz if missing.
set -euo pipefail
cd "$(dirname "$0")"
secs="${FUZZ_SMOKE_SECS:-5}"
toolchain="${FUZZ_TOOLCHAIN:-nightly}"
if ! rustup run "$toolchain" rustc --version >/dev/null 2>&1; then
    echo "fuzz smoke: the $toolchain toolchain is missing: rustup toolchain install $toolchain" >&2
    exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
# Safe Rust (agentd forbids unsafe_code): no sanitizer, twice the executions. Debug assertions
# and overflow checks stay on (cargo-fuzz's default).
flags=(--sanitizer none)
# FUZZ_TARGET_DIR: where the build goes (default fuzz/target); .ci/run keeps it in its cache.
if [ -n "${FUZZ_TARGET_DIR:-}" ]; then flags+=(--target-dir "$FUZZ_TARGET_DIR"); fi
cargo "+$toolchain" fuzz build "${flags[@]}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for target in $(cargo "+$toolchain" fuzz list); do
    mkdir -p "$scratch/$target"
    echo "== $target (${secs}s)"
    # New inputs go to the scratch dir: the seeds stay as committed.
    if ! cargo "+$toolchain" fuzz run "${flags[@]}" "$target" "$scratch/$target" "seeds/$target" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        >"$scratch/$target.log" 2>&1; then
        tail -n 60 "$scratch/$target.log"
        echo "fuzz smoke: $target failed (the input is in fuzz/artifacts/$target/)"
        exit 1
    fi
    grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$scratch/$target.log" || true
done
echo "fuzz smoke: every target ran ${secs}s without a finding"
