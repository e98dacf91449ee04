"""How the Slurm backend reaches the cluster: its settings section (`backend = "slurm"`).

Flat names as everywhere: `VIGIL_RECOVERY_SLURM_READ_INTERVAL_S`, or `slurm_read_interval_s` in
`[recovery]`. slurmrestd is not used (a non-goal for now: the CLIs are what every site has).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SlurmSettings(BaseModel):
    """The Slurm CLIs vigil calls, their bounds, and how hosts map to node names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    conf: str = Field(default="", description="slurm.conf path handed to the CLIs as SLURM_CONF (empty: theirs)")
    scontrol: str = Field(default="scontrol", description="path of scontrol (drain, resume, show node, hostnames)")
    sinfo: str = Field(default="sinfo", description="path of sinfo (node states and reasons, rate-limited)")
    squeue: str = Field(default="squeue", description="path of squeue (is an allocation still running)")
    sbatch: str = Field(default="sbatch", description="path of sbatch (a fresh job when the allocation is gone)")
    relaunch_script: str = Field(default="", max_length=4096, description="batch script the controller submits "
                                 "(`sbatch --no-requeue -N MIN-MAX --exclude=<cordoned>`) when a recovery finds the "
                                 "job's allocation gone; empty: never submits (the recovery pages instead)")
    relaunch_scripts: dict[str, str] = Field(default_factory=dict, description="vigil job id -> its batch script, "
                                             "checked before relaunch_script (a job named by VIGIL_JOB_ID)")
    command_timeout_s: float = Field(default=10.0, gt=0, description="bound on one CLI call; past it the call "
                                     "fails (a read keeps the last known state)")
    read_interval_s: float = Field(default=5.0, ge=0, description="at most one sinfo read of the nodes per this "
                                   "many seconds (sinfo is the controller's heaviest RPC); reads between are "
                                   "served from the last one")
    partition: str = Field(default="", description="read only this partition's nodes (empty: all)")
    node_map: dict[str, str] = Field(default_factory=dict, description="host -> Slurm node name, checked first; "
                                     "else the node is named like the host (SLURMD_NODENAME under srun)")
    reason_chars: int = Field(default=200, ge=32, le=1000, description="longest drain reason vigil writes")
