-- The lease design's worker cycle as a pgbench script: claim, 3 heartbeats, complete, each
-- statement autocommitted (the claim, heartbeat and complete blocks of jobctl/sql/queries.sql,
-- on the benchmark's table). Driven by bench_pgbench.py:
--   pgbench -n -M prepared -c 4 -T 10 -r -f tests/bench/cycle.sql jobctl_bench
WITH target AS (
    SELECT id FROM bench_trigger
    WHERE status = 'queued' AND available_at <= now()
    ORDER BY available_at, id
    FOR UPDATE SKIP LOCKED
    LIMIT 1
)
UPDATE bench_trigger AS j
SET status = 'processing',
    reserved_by = 'pgbench-' || :client_id,
    reserved_at = now(),
    lease_expires_at = now() + interval '60 seconds',
    attempt_token = gen_random_uuid(),
    attempts = j.attempts + 1,
    updated_at = now()
FROM target
WHERE j.id = target.id
RETURNING j.id, j.attempt_token \gset
UPDATE bench_trigger
SET heartbeat_at = now(), lease_expires_at = now() + interval '60 seconds', updated_at = now()
WHERE id = :id AND status = 'processing'
  AND reserved_by = 'pgbench-' || :client_id AND attempt_token = :attempt_token
RETURNING lease_expires_at;
UPDATE bench_trigger
SET heartbeat_at = now(), lease_expires_at = now() + interval '60 seconds', updated_at = now()
WHERE id = :id AND status = 'processing'
  AND reserved_by = 'pgbench-' || :client_id AND attempt_token = :attempt_token
RETURNING lease_expires_at;
UPDATE bench_trigger
SET heartbeat_at = now(), lease_expires_at = now() + interval '60 seconds', updated_at = now()
WHERE id = :id AND status = 'processing'
  AND reserved_by = 'pgbench-' || :client_id AND attempt_token = :attempt_token
RETURNING lease_expires_at;
UPDATE bench_trigger
SET status = 'done',
    reserved_by = NULL, reserved_at = NULL, heartbeat_at = NULL,
    lease_expires_at = NULL, attempt_token = NULL,
    finished_at = now(), updated_at = now()
WHERE id = :id AND status = 'processing' AND attempt_token = :attempt_token
RETURNING id;
