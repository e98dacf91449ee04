"""Node diagnostics: the self-check tests a host runs while its job is paused, and what they mean.

    checks     GEMM, intra-node all-to-all, all-reduce with the group (torch, a time limit each)
    __main__   one host's part of one round, run by its node agent; prints `diagnostic` events
    grouping   DLRover's two-round grouping and the verdicts (pure)

The controller builds the rounds' groups and commands; agents run `python -m
vigil.recovery.diagnostics ...` as a child, without importing this package.
"""
