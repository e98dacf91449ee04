-- Dead letters keep a bounded payload (vigil/kafka/deadletter.py): its head, plus the original's
-- size and sha256, which identify it in its source topic. Two bad events of one record with the
-- same reason are two letters: the hash joins the sorting key (new columns only, so rows written
-- before keep their key; ReplacingMergeTree then merges only a letter written twice).
ALTER TABLE dead_letters
    ADD COLUMN IF NOT EXISTS payload_bytes UInt64,
    ADD COLUMN IF NOT EXISTS payload_sha256 String,
    ADD COLUMN IF NOT EXISTS payload_truncated UInt8,
    MODIFY ORDER BY (topic, partition, offset, reason, payload_sha256);
