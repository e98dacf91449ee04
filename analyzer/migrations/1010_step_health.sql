-- Training-health signals on the step record (issue 51): the loss, the rank's local gradient norm before the
-- all-reduce, the count of non-finite values the rank saw in its loss and gradients, and the update ratio
-- ||dθ||/||θ||. Each is optional (null where the training loop did not report it); the contract holds the floats
-- finite and bounded, so a NaN loss reaches here as a null loss with `nonfinite` > 0.
ALTER TABLE step_timings ADD COLUMN IF NOT EXISTS loss Nullable(Float64) AFTER dropped;
ALTER TABLE step_timings ADD COLUMN IF NOT EXISTS grad_norm Nullable(Float64) AFTER loss;
ALTER TABLE step_timings ADD COLUMN IF NOT EXISTS nonfinite Nullable(UInt32) AFTER grad_norm;
ALTER TABLE step_timings ADD COLUMN IF NOT EXISTS update_ratio Nullable(Float64) AFTER nonfinite;
