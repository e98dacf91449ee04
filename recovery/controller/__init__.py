"""The recovery controller: incidents and alerts in, decisions, commands and cordons out.

    state      the fold of the log (cases, steps, members, acks, checkpoints), order-independent
    triggers   what starts a recovery: incidents, critical alerts, unexplained exits (pure)
    plan       the steps per fault class, the next world, the circuit breaker (pure)
    steps      the re-entrant steps: approve, dump, pause, cordon, restart, halt, page
    diagnose   the two-round diagnostics step and the verdicts
    goodput    outcome per incident (where the time went), effective training time per job
    engine     one turn: triggers -> cases -> next steps
    effects    publishing and the node backend, behind one interface
    lease      one active controller per cluster (a Kafka consumer-group lease)
    service    the long-running service: follow the log, hold the lease, tick
    report     status and history for `vigil recovery`
"""
