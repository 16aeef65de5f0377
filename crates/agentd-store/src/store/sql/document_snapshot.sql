-- The snapshot of an action on document $2 of org $1 (migration 0090's `document_snapshot`),
-- the document's row locked until the transaction ends; the missing form when it is missing
-- or another org's (the sub-select is then NULL).
SELECT document_snapshot($2, (SELECT d FROM documents d
                               WHERE d.org_id = $1 AND d.id = $2
                                 FOR UPDATE))
