"""Kafka plumbing: the embedded broker, topic admin, the event producer, the batching consumer, group lag."""
