#!/usr/bin/env bash
# Review 2026-11-26, suspicion S2: how long an event stays invisible to cursor readers
# (`store::events::list_after`'s `tx < pg_snapshot_xmin(pg_current_snapshot())`) while a write
# transaction is open in ANOTHER database of the same cluster. Prints seconds from the event's
# commit until a read sees it: once with nothing else open, then with a transaction holding an
# xid for 2 s and 5 s in `OTHER_DB` (opened 0.3 s before the event). Polls every 50 ms.
#
#   DB=<a migrated agentd database> OTHER_DB=postgres PGHOST=127.0.0.1 PGUSER=postgres \
#     scripts/measure-s2-event-visibility.sh
#
# Writes one org (a fixed id) and its probe events into DB, and removes the events afterwards.
set -euo pipefail
DB=${DB:?a migrated agentd database}
OTHER_DB=${OTHER_DB:-postgres}
ORG=00000000-0000-0000-0000-0000000000e2
q() { psql -d "$1" -v ON_ERROR_STOP=1 -Atqc "$2"; }
q "$DB" "INSERT INTO orgs (id, name) VALUES ('$ORG', 'measure-s2') ON CONFLICT DO NOTHING" >/dev/null
visible_after() {
  local id t0 n
  id=$(q "$DB" "INSERT INTO agentd_events (org_id, type, occurred_at)
                VALUES ('$ORG', 'measure.probe', now()) RETURNING id" | head -1)
  t0=$(date +%s.%N)
  for _ in $(seq 1 400); do
    n=$(q "$DB" "SELECT count(*) FROM agentd_events WHERE org_id = '$ORG' AND id = $id
                   AND tx < pg_snapshot_xmin(pg_current_snapshot())")
    if [ "$n" = 1 ]; then echo "$(date +%s.%N) - $t0" | bc; return; fi
    sleep 0.05
  done
  echo "not visible after 20 s"
}
echo "nothing else open: $(visible_after) s"
for hold in 2 5; do
  q "$OTHER_DB" "BEGIN; SELECT pg_current_xact_id(); SELECT pg_sleep($hold); COMMIT;" >/dev/null &
  sleep 0.3
  echo "a write transaction open ${hold} s in $OTHER_DB: $(visible_after) s"
  wait
done
q "$DB" "DELETE FROM agentd_events WHERE org_id = '$ORG' AND type = 'measure.probe'" >/dev/null
