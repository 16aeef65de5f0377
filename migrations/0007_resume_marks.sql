-- A run's deadline counts its active time: each resume of a run (after a crash, a release or a
-- retry) is marked, and time between the last checkpoint before it and the resume is not
-- counted.
ALTER TABLE agent_loop_marks DROP CONSTRAINT agent_loop_marks_kind_check;
ALTER TABLE agent_loop_marks ADD CONSTRAINT agent_loop_marks_kind_check
    CHECK (kind IN ('nudge', 'cap', 'resume'));
