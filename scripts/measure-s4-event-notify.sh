#!/usr/bin/env bash
# Review 2026-11-26, suspicion S4: does the `pg_notify` in the event dispatch trigger
# (migrations 0042, 0067) serialise commits? pgbench commits one-event transactions from
# CLIENTS clients for SECS seconds with the trigger as it is, then with the same trigger minus
# the NOTIFY, ROUNDS times, and prints each run's transactions per second. The trigger is
# restored at the end (and on failure).
#
#   DB=<a migrated agentd database, not one in use> PGHOST=127.0.0.1 PGUSER=postgres \
#     scripts/measure-s4-event-notify.sh
set -euo pipefail
DB=${DB:?a migrated agentd database}
CLIENTS=${CLIENTS:-8}
SECS=${SECS:-10}
ROUNDS=${ROUNDS:-3}
ORG=00000000-0000-0000-0000-0000000000e4
q() { psql -d "$DB" -v ON_ERROR_STOP=1 -Atqc "$1"; }
q "INSERT INTO orgs (id, name) VALUES ('$ORG', 'measure-s4') ON CONFLICT DO NOTHING" >/dev/null
script=$(mktemp)
echo "INSERT INTO agentd_events (org_id, type, occurred_at) VALUES ('$ORG', 'measure.probe', now());" >"$script"
with_notify=$(q "SELECT pg_get_functiondef('agentd_events_dispatch'::regproc)")
without_notify=$(printf '%s\n' "$with_notify" | grep -v "pg_notify('agentd_events'")
restore() { q "$with_notify" >/dev/null; q "DELETE FROM agentd_events WHERE org_id = '$ORG'" >/dev/null; rm -f "$script"; }
trap restore EXIT
tps() { pgbench -n -c "$CLIENTS" -j 2 -T "$SECS" -f "$script" "$DB" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }
for r in $(seq 1 "$ROUNDS"); do
  q "$with_notify" >/dev/null
  a=$(tps)
  q "$without_notify" >/dev/null
  b=$(tps)
  echo "round $r: with NOTIFY $a tps, without $b tps"
done
