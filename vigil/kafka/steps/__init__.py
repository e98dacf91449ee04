"""A consumer's processing steps, arroyo-style: each one job, each `submit`/`poll`/`join`/`close`.

The chain (`vigil.kafka.steps.chain.build`, the one place it is listed):

    polled record -> Decode -> Accumulate (size/time bound) -> Stage -> Write (one batch in flight) -> Commit

A component may list steps of its own in its chain (the analyzer's `vigil.analyzer.ingest.steps`).

`vigil.kafka.consumer.BatchingConsumer` is the source that feeds it (the group, rebalances, re-cuts, retries).
"""
