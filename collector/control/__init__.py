"""The node's control wing: what `vigil run` does when the recovery controller orders it.

The telemetry side of the agent (collector/, its root) observes and ships; this wing acts: it
launches the training command, answers signed commands, joins rendezvous, runs diagnostics,
keeps warm interpreters and replicates snapshots to buddy hosts. It imports the telemetry side
(the agent, the classifiers, the exits); the telemetry side never imports it (an import-linter
contract in pyproject.toml).

Modules, one concept each:

    supervisor   the agent under recovery control: commands in, generations started and stopped
    commands     the signed command feed of one host, and acks
    rendezvous   node ranks, ports and the torchrun rendezvous environment of a generation
    progress     the generation's progress (last step seen) for acks and reports
    diagnose     a diagnostics round: the installed checks run as a child, bounded
    launcher     the child process of `vigil run`: pipes, echo, signals, exit
    torchrun     torchrun's command line: parse and rewrite
    childenv     the training command's environment: the agent's minus vigil's credentials
    stopping     process groups stopped in order (SIGTERM, then SIGKILL)
    warm         warm start: the next generation's interpreters started ahead, torch imported
    warmlaunch   (run by path) torchrun's part on one node, for the warm interpreters
    warmchild    (run by path) one warm interpreter: imports, then runs the entry point on order
    warmdiag     one warm diagnostics interpreter, waiting for its round
    replicas     the host's store of in-memory snapshot replicas
    replication  snapshot replication to buddy hosts
    buddies      which hosts hold a host's replicas, and the transport between them
"""
