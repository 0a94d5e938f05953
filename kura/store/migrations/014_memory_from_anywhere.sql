-- 014: memory from anywhere.
-- Why: only mikado's extraction indexed memory, so a `memory.fact` or `memory.decision` that a
-- person added with `kura record add` (or any other writer) was never found by `kura search`.
-- Every new memory record is now indexed when it is stored; this indexes the ones stored
-- before. No schema change.

INSERT INTO kb (text, record_id, record_type)
SELECT json_extract(r.content, '$.text'), r.record_id, r.record_type
  FROM records r
 WHERE r.record_type IN ('memory.fact', 'memory.decision')
   AND json_type(r.content, '$.text') = 'text'
   AND r.record_id NOT IN (SELECT record_id FROM kb);
