"""Ingest: telemetry and alert events from Kafka into ClickHouse tables, idempotently."""
