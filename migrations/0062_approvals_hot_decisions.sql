-- Issue 18: deciding an approval is a HOT update.
--
-- The expiry sweep ends tens of thousands of approvals per run by setting `status`, `decided_by`,
-- `decided_at` and `result`. Three partial indexes named `status` or `decided_at`, so every
-- decision was a non-HOT update: a new entry in each index of the table (five per expired
-- approval), each written to the WAL. No index now names a column a decision changes, and the
-- table leaves room in its pages (fillfactor 70) for the new row version beside the old one, so
-- a decision writes the heap page only.
--
-- What the dropped indexes served:
--   pending_idx  (expires_at) WHERE status = 'pending': `approval.expiring` notices read pending
--                approvals in an expires_at window. A full index on expires_at serves the same
--                range (decided rows in the window are filtered by status).
--   decided_idx  (decided_at) WHERE status <> 'pending': the purge of decided approvals reads
--                through created_at instead (an approval is decided after it is made; see
--                `store::approvals_sweep::purge_decided`); the re-proposal queries (stale or expired
--                approvals decided in the last day, once per sweep) read the table.
--   expired_idx  (decided_at) WHERE status = 'expired' AND reproposed_as IS NULL: the expired
--                re-proposal query, as above.
DROP INDEX pending_approvals_pending_idx;
DROP INDEX pending_approvals_decided_idx;
DROP INDEX pending_approvals_expired_idx;
CREATE INDEX pending_approvals_expires_idx ON pending_approvals (expires_at);
CREATE INDEX pending_approvals_created_idx ON pending_approvals (created_at);
ALTER TABLE pending_approvals SET (fillfactor = 70);
