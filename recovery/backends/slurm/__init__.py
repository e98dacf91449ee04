"""The Slurm node backend: drain and resume with vigil's reason, read node states back, through the CLIs.

`SlurmBackend` implements `base.NodeBackend` with `scontrol` and `sinfo` (`backend = "slurm"`,
the `slurm` section of the recovery settings):

* **cordon** — `scontrol update nodename=N state=drain reason="vigil: <incident id> <cause>"`.
  Idempotent: a node vigil already drained is not touched (`changed` False). A node drained or
  down with anyone else's reason is left as it is, its reason kept: it is evidence.
* **uncordon** — `state=resume` only when the node's reason starts with `vigil:` (`nodes.PREFIX`);
  an external drain is never cleared (`changed` False, the detail names its reason and who set it).
* **evict** — nothing to do: Slurm keeps a drained node's running allocation, and vigil's own
  agents stop the job's ranks (the recovery's pause), so no `scancel` is sent.
* **cordoned()** — the nodes vigil drained, read back from `sinfo -h -N` (reason, who, when);
  `drained()` lists every drain, others' included.

Reads are rate-limited: one `sinfo` per `read_interval_s`, later calls served from it; a read that
fails or passes `command_timeout_s` keeps the last known state (logged, `stale` says why), so a
busy slurmctld never crashes the controller. Writes read the one node fresh first
(`scontrol show node -o`); their failures are `BackendError`s naming the host and command.
Host -> node: `node_map`, else the same name (`SLURMD_NODENAME`, which `vigil run` under `srun`
takes as its host). `allocation` reads the job's allocation from the environment and builds
the relaunch commands (`srun` inside it with `--exclude`, else `sbatch --no-requeue`).
* **relaunch** (`base.Relauncher`, `relaunch`) — when a recovery finds the job's allocation gone and
  `relaunch_script` is set, the controller submits it afresh: `sbatch --no-requeue` without the
  cordoned nodes, through the same bounded runner; never a requeue, never the old job id.
"""

from vigil.recovery.backends.slurm.backend import SlurmBackend
from vigil.recovery.backends.slurm.cli import CliTimeout, SlurmCli, SubprocessCli
from vigil.recovery.backends.slurm.nodes import PREFIX, NodeState, make_reason, parse_reason
from vigil.recovery.backends.slurm.settings import SlurmSettings

__all__ = ["PREFIX", "CliTimeout", "NodeState", "SlurmBackend", "SlurmCli", "SlurmSettings", "SubprocessCli",
           "make_reason", "parse_reason"]
