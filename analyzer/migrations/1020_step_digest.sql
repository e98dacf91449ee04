-- Replica digests on the step record (issue 51): every N steps each rank's order-sensitive 64-bit digest of its
-- parameter shard after the step (vigil.timer.digest). Data-parallel replicas of one shard (same pp/tp) must agree;
-- analyzer/detect/replicas.py names the odd one by majority. Null on the steps that took none.
ALTER TABLE step_timings ADD COLUMN IF NOT EXISTS digest Nullable(Int64) AFTER update_ratio;
