"""What the training side shares, in one stdlib-only leaf: env names, identity, the spool, the snapshot layout.

    env        every ``VIGIL_*`` name the training side reads (and the agent sets for it), and their readers
    identity   job / host / rank of this process (arguments, then torch.distributed, then the environment)
    spool      the one bounded, non-blocking JSON-lines spool (the step timer's and the checkpointer's)
    spoolfile  its files: ``<spool>/<job>/<host>-rank<rank>.[<stream>-]<seq>.jsonl``, rotation, torn lines
    snapshot   the in-memory snapshot's format and layout names (the checkpointer writes, the agent reads)

Imported by `vigil.timer`, `vigil.data`, `vigil.recovery.checkpoint`, the node diagnostics and the agent; it imports
only the standard library (never torch, never another vigil package: import-linter's ``trainside`` contract), so
importing it costs a training process nothing and it can never reach a platform credential.
"""
