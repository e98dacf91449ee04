-- Raw telemetry written by the analyzer's ingest (one row per event, or per GPU / per rank).
-- Every table is a ReplacingMergeTree whose sorting key ends with event_id: a re-delivered event
-- collapses on merge, and the ingest writer skips event_ids already stored, so materialised
-- rollups below never see an event twice. Partitions by day; TTL from settings (retention_days).

CREATE TABLE IF NOT EXISTS jobs (
    job_id LowCardinality(String),
    ts DateTime64(3, 'UTC'),
    event_id String,
    name String,
    world_size UInt32,
    tp UInt32,
    pp UInt32,
    dp UInt32,
    gpus_per_host UInt32,
    gpu_model LowCardinality(String),
    gpu_peak_tflops Nullable(Float64),
    model_flops_per_step Nullable(Float64),
    hosts Array(String),
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree(ts)
ORDER BY job_id;

CREATE TABLE IF NOT EXISTS job_ranks (
    job_id LowCardinality(String),
    rank UInt32,
    host LowCardinality(String),
    local_rank UInt32,
    dp UInt32,
    tp UInt32,
    pp UInt32,
    ts DateTime64(3, 'UTC')
) ENGINE = ReplacingMergeTree(ts)
ORDER BY (job_id, rank);

CREATE TABLE IF NOT EXISTS step_timings (
    event_id String,
    job_id LowCardinality(String),
    host LowCardinality(String),
    rank UInt32,
    local_rank UInt32,
    world_size UInt32,
    dp UInt32,
    tp UInt32,
    pp UInt32,
    step UInt64,
    ts DateTime64(3, 'UTC'),
    step_ms Float64,
    phases Map(LowCardinality(String), Float64),
    tokens Nullable(UInt64),
    tflops Nullable(Float64),
    mfu Nullable(Float64),
    failed UInt8,
    dropped UInt32,
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, step, host, rank, event_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY;

CREATE TABLE IF NOT EXISTS heartbeats (
    event_id String,
    job_id LowCardinality(String),
    host LowCardinality(String),
    ts DateTime64(3, 'UTC'),
    ip String,
    pod String,
    node LowCardinality(String),
    agent_version LowCardinality(String),
    uptime_s Float64,
    interval_s Float64,
    procs_total UInt32,
    procs_running UInt32,
    gpus UInt32,
    gpu_util_avg Nullable(Float64),
    gpu_temp_max Nullable(Float64),
    gpu_ecc_uncorrected UInt64,
    gpus_throttled UInt32,
    dropped_events UInt64,
    spooled_events UInt64,
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, host, ts, event_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY;

CREATE TABLE IF NOT EXISTS gpu_stats (
    event_id String,
    job_id LowCardinality(String),
    host LowCardinality(String),
    gpu UInt32,
    ts DateTime64(3, 'UTC'),
    name LowCardinality(String),
    util_pct Nullable(Float64),
    mem_used_mib Nullable(Float64),
    temp_c Nullable(Float64),
    power_w Nullable(Float64),
    sm_clock_mhz Nullable(Float64),
    throttle_reasons Array(LowCardinality(String)),
    ecc_uncorrected Nullable(UInt64)
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, host, gpu, ts, event_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY;

CREATE TABLE IF NOT EXISTS nic_counters (
    event_id String,
    job_id LowCardinality(String),
    host LowCardinality(String),
    device LowCardinality(String),
    port UInt32,
    link LowCardinality(String),
    ts DateTime64(3, 'UTC'),
    tx_bytes UInt64,
    rx_bytes UInt64,
    tx_bps Float64,
    rx_bps Float64,
    interval_s Float64,
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, host, device, ts, event_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY;

CREATE TABLE IF NOT EXISTS log_lines (
    event_id String,
    job_id LowCardinality(String),
    host LowCardinality(String),
    ts DateTime64(3, 'UTC'),
    rank Nullable(UInt32),
    local_rank Nullable(UInt32),
    stream LowCardinality(String),
    category LowCardinality(String),
    severity LowCardinality(String),
    message String,
    xid Nullable(Int32),
    repeats UInt32
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, ts, host, event_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY;

CREATE TABLE IF NOT EXISTS process_exits (
    event_id String,
    job_id LowCardinality(String),
    host LowCardinality(String),
    ts DateTime64(3, 'UTC'),
    rank Nullable(UInt32),
    local_rank Nullable(UInt32),
    pid UInt32,
    exit_code Nullable(Int32),
    signal String,
    summary String,
    traceback String
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, ts, host, event_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY;

CREATE TABLE IF NOT EXISTS collective_traces (
    event_id String,
    job_id LowCardinality(String),
    host LowCardinality(String),
    rank UInt32,
    ts DateTime64(3, 'UTC'),
    dumped_at Nullable(DateTime64(3, 'UTC')),
    process_groups Map(String, String),
    last_started_seq Map(String, Int64),
    last_completed_seq Map(String, Int64),
    entries String
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, ts, rank, event_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY;
