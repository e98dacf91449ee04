"""Recovery: the training-side checkpointer, the node diagnostics, the node backends and the controller.

    checkpoint    two-phase checkpointing and restore, in every training rank (stdlib + torch)
    diagnostics   self-check tests run by the node agents, two-round grouping and verdicts
    backends      cordon / uncordon / evict behind one Protocol: local registry, Kubernetes
    controller    the recovery controller: incidents in, decisions and commands out
    hosting       the controller as a `vigil up` service
"""
