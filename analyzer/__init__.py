"""The analyzer: Kafka -> ClickHouse ingest, SQL detectors over sliding windows, alerts as events.

    ingest/      processors (event -> rows), the idempotent ClickHouse writer, the consumer loop
    detect/      one module per detector; each turns query rows into findings (pure logic)
    alerts/      the alert book (findings -> Alert events with a lifecycle) and the current view
    engine.py    runs the detectors at event-time points (live catch-up and replay)
    service.py   AnalyzerService, hosted by `vigil up`
    simulator/   a fault-injecting cluster simulator streaming telemetry through the real broker
    cli.py       `vigil analyzer [replay]`, `vigil alerts`, `vigil simulate`

Errors (on top of vigil.errors):

    ValueError                  bad user input: a fault spec, a time, a setting (SettingsError)
    vigil.errors.Unreachable    Kafka or ClickHouse did not answer
    vigil.errors.DeliveryError  alerts or simulated telemetry could not be handed to Kafka

Threads of the service never raise: failures land in `health()["last_error"]`.
"""
