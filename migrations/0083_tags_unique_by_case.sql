-- Tag names are unique per org ignoring case (review #23): `store::tags::create` looks a name
-- up with `lower(name)`, but two concurrent creates of `Urgent` and `urgent` both passed the
-- lookup and both inserted, since the only unique key was the exact `(org_id, name)`.
--
-- Case duplicates made so far are merged into the oldest tag of the name: documents and
-- prompts that carry a duplicate carry the kept tag instead (once, where it first appeared).
CREATE TEMPORARY TABLE tag_merge AS
SELECT id, keep FROM (
    SELECT id, first_value(id) OVER (PARTITION BY org_id, lower(name)
                                     ORDER BY created_at, id) AS keep
      FROM tags
) t
 WHERE id <> keep;

UPDATE documents d
   SET tag_ids = ARRAY(
        SELECT tag FROM (
            SELECT coalesce(m.keep, u.tag) AS tag, min(u.pos) AS pos
              FROM unnest(d.tag_ids) WITH ORDINALITY u(tag, pos)
              LEFT JOIN tag_merge m ON m.id = u.tag
             GROUP BY 1
        ) s ORDER BY pos)
 WHERE d.tag_ids && ARRAY(SELECT id FROM tag_merge);

UPDATE prompts p
   SET tag_ids = ARRAY(
        SELECT tag FROM (
            SELECT coalesce(m.keep, u.tag) AS tag, min(u.pos) AS pos
              FROM unnest(p.tag_ids) WITH ORDINALITY u(tag, pos)
              LEFT JOIN tag_merge m ON m.id = u.tag
             GROUP BY 1
        ) s ORDER BY pos)
 WHERE p.tag_ids && ARRAY(SELECT id FROM tag_merge);

DELETE FROM tags WHERE id IN (SELECT id FROM tag_merge);
DROP TABLE tag_merge;

CREATE UNIQUE INDEX tags_org_lower_name_key ON tags (org_id, lower(name));
ALTER TABLE tags DROP CONSTRAINT tags_org_id_name_key;
