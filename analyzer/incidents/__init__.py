"""Incidents: findings that share one cause, with the culprit named and its victims listed.

    flightrec   Flight Recorder dumps as the matcher reads them (per group: last seq, newest ops)
    match       cross-rank matching of one hang's dumps -> culprits, victims, the stuck collective
    errors      what a rank's own error says: a peer's failure, a teardown, hardware, network
    roster      a job's ranks: host, local rank, coords, last step (SQL)
    build       the incidents an evaluation instant's findings amount to (pure)
    book        incident lifecycle: stable ids, open -> updated -> resolved, rebuilt from the topic
    stage       the hook between the detectors and the alert book: build, link, demote victims
    view        reading incidents back (topic / table) for the CLI

Nothing here raises on bad data: an unreadable trace or message is skipped and counted.
"""
