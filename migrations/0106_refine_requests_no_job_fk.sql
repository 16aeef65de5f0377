-- refine_requests (0100) loses its foreign key to agentd_jobs. A key referencing the queue's
-- table puts a referential trigger on every row the queue deletes — each ack with
-- delete_on_success, each retention batch — for a table that holds a row per refine, and it
-- makes the jobs table one that cannot be truncated alone (the drain bench's reset failed on
-- it). The queue stays a table nothing of the domain references. A refine's row still goes
-- with its document (the key to documents, and erasure), and with its job: the transcript
-- retention pass deletes the rows whose job the queue no longer has
-- (`pii::retention::TranscriptRetention`).
ALTER TABLE refine_requests DROP CONSTRAINT refine_requests_job_id_fkey;
