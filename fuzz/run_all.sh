#!/usr/bin/env bash
# Runs every target (or the ones named) one after another for SECS seconds each, with the limits
# of fuzz/README.md, and prints one line per target: executions, time, corpus size, result.
#
#   fuzz/run_all.sh 300                  # 5 minutes each
#   fuzz/run_all.sh 600 pii_vault repair # 10 minutes, two targets
set -uo pipefail
cd "$(dirname "$0")"
secs="${1:-300}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
mkdir -p logs
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    log="logs/$t.log"
    start=$(date +%s)
    cargo +nightly fuzz run --sanitizer none "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 >"$log" 2>&1
    rc=$?
    end=$(date +%s)
    execs=$(grep -oP '^stat::number_of_executed_units:\s*\K[0-9]+' "$log" | tail -1)
    rss=$(grep -oP '^stat::peak_rss_mb:\s*\K[0-9]+' "$log" | tail -1)
    corpus=$(find "corpus/$t" -type f | wc -l)
    result=ok
    [ $rc -ne 0 ] && result="FINDING (rc $rc): $(grep -m1 -E 'panicked at|ERROR: libFuzzer' "$log" | cut -c1-160)"
    echo "$t execs=${execs:-?} secs=$((end - start)) corpus=$corpus peak_rss_mb=${rss:-?} $result"
done
