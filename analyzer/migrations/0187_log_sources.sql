-- Where a classified line came from (issue 49): `kernel` (the host's kernel log, read by the agent), `nvml`,
-- `sysfs`, or `process` (a training process's own output: a claim, never a kernel fact), the Xid catalog's
-- action the agent stamped on it, and the GPU its PCI address names.
ALTER TABLE log_lines ADD COLUMN IF NOT EXISTS source LowCardinality(String) DEFAULT 'process' AFTER repeats;
ALTER TABLE log_lines ADD COLUMN IF NOT EXISTS action LowCardinality(String) DEFAULT '' AFTER source;
ALTER TABLE log_lines ADD COLUMN IF NOT EXISTS gpu_index Nullable(UInt32) AFTER action;
