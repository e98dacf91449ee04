"""The environment a launched training command gets: the agent's, minus vigil's credentials.

Training code is untrusted and holds no platform credential. `child_environment` keeps every
non-vigil variable (PATH, CUDA, NCCL, the user's own settings) and, of the ``VIGIL_*``
variables, only those the training side reads (`TRAINING_VARS`, `TRAINING_PREFIXES`: the
step timer's and the checkpointer's identity, spool, snapshot directory and tuning knobs, and the node
diagnostics', which the agent runs in the same environment). Everything else of
vigil's (``VIGIL_KAFKA_EXTRA`` with its SASL password, ``VIGIL_CLICKHOUSE_DSN``, key paths,
``VIGIL_HOME``, where `vigil up` keeps state and keys, any future secret) never reaches the child: an
allowlist, so a new setting is withheld until someone decides the training side needs it (`vigil run`
names the spool, trace and snapshot paths itself). The agent's own process is closed to the child too
(`collector.principal`). Pure logic.
"""

from __future__ import annotations

from collections.abc import Mapping

from vigil.trainside import env

TRAINING_VARS: frozenset[str] = env.INHERITED  # named, with their meaning, in vigil.trainside.env
TRAINING_PREFIXES: tuple[str, ...] = env.INHERITED_PREFIXES
"""`VIGIL_HANG_*`: the timer's hang watchdog; `VIGIL_DIAG_*`: the node diagnostics' own knobs (they run in the
same environment as training: vigil.recovery.diagnostics reads `VIGIL_DIAG_SLOWDOWN`). No credential."""


def for_training(name: str) -> bool:
    return not name.startswith(env.PREFIX) or name in TRAINING_VARS or name.startswith(TRAINING_PREFIXES)


def child_environment(agent_env: Mapping[str, str], additions: Mapping[str, str]) -> dict[str, str]:
    """`agent_env` without vigil's own settings, then `additions` (the agent's identity for the child)."""
    env = {k: v for k, v in agent_env.items() if for_training(k)}
    env.update(additions)
    return env
