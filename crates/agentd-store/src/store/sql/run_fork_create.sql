-- A fork of run $2 (of org $1) from its step $4: a new run $3 of the parent's kind and subject,
-- driven by job $5, with model $6 and provider $7, started at $8, whose counters are what the
-- copied checkpoints hold (rounds, tool calls, tokens: caps count across the fork as across one
-- run). Its cost is its own calls': the copied ones were paid by the parent.
INSERT INTO agent_runs (id, org_id, kind, subject, job_id, provider, model, status, started_at,
                        parent_run_id, parent_step, rounds, tool_calls, input_tokens, output_tokens)
SELECT $3, p.org_id, p.kind, p.subject, $5, $7, $6, 'running', $8, p.id, $4,
       COALESCE(c.rounds, 0), COALESCE(c.tool_calls, 0), COALESCE(c.input_tokens, 0),
       COALESCE(c.output_tokens, 0)
  FROM agent_runs p
  LEFT JOIN LATERAL (
      SELECT count(*) FILTER (WHERE s.kind = 'llm_response')::int AS rounds,
             count(*) FILTER (WHERE s.kind = 'tool_result')::int AS tool_calls,
             sum(COALESCE((s.payload #>> '{response,usage,input_tokens}')::bigint, 0))
                 FILTER (WHERE s.kind IN ('llm_response', 'tool_model'))::bigint AS input_tokens,
             sum(COALESCE((s.payload #>> '{response,usage,output_tokens}')::bigint, 0))
                 FILTER (WHERE s.kind IN ('llm_response', 'tool_model'))::bigint AS output_tokens
        FROM agent_steps s
       WHERE s.run_id = p.id AND s.seq < $4
  ) c ON true
 WHERE p.org_id = $1 AND p.id = $2
RETURNING *
