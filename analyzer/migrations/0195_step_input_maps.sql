-- step_timings reads its two maps through EPHEMERAL Map(String, ...) inputs and stores them as before
-- (LowCardinality keys): the engine's JSON reader is ~2.5x slower into a LowCardinality map than into a
-- String one, and the cast of a whole column after parsing costs little (bench/RESULTS.md, issue 26).
-- Rollups read `phases`/`phase_kinds` as before: a dependent view sees the block with its defaults filled.
-- Who inserts `phases` itself (a backfill, a bench) still can; the ingest writer sends the inputs
-- (analyzer/ingest/blocks.py INPUTS). Metadata only: no stored part is rewritten.
-- Never `MATERIALIZE COLUMN phases` (or phase_kinds): it would recompute stored maps from the empty inputs.
ALTER TABLE step_timings ADD COLUMN IF NOT EXISTS phases_in Map(String, Float64) EPHEMERAL;
ALTER TABLE step_timings ADD COLUMN IF NOT EXISTS phase_kinds_in Map(String, String) EPHEMERAL;
ALTER TABLE step_timings MODIFY COLUMN phases Map(LowCardinality(String), Float64) DEFAULT phases_in;
ALTER TABLE step_timings MODIFY COLUMN phase_kinds Map(LowCardinality(String), LowCardinality(String)) DEFAULT phase_kinds_in;
