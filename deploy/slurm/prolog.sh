#!/bin/bash
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/vigil-prolog.sh): vigil's node diagnostics before a job starts.
#
# Runs this node's own checks (GEMM and the intra-node all-to-all of `python -m vigil.recovery.diagnostics`;
# the cross-node all-reduce needs the job's other nodes and runs under the recovery controller instead).
# Their verdict: the `diagnostic` JSON lines go to the job's prolog log (stdout) and, attested by this node's agent
# key, onto vigil's log (`vigil diagnostics publish`, where VIGIL_PROLOG_PUBLISH=1); on failure the node is
# drained with vigil's reason, "vigil: prolog-<job> <failed checks>" (so vigil may resume it once healthy,
# and an operator's drain is never touched), and the prolog exits 1: Slurm keeps the job off this node.
set -uo pipefail

PYTHON="${VIGIL_PYTHON:-/opt/vigil/.venv/bin/python}"
SCONTROL="${VIGIL_SCONTROL:-scontrol}"
NODE="${SLURMD_NODENAME:-$(hostname -s)}"
JOB="${SLURM_JOB_ID:-none}"
read -r -a ARGS <<< "${VIGIL_PROLOG_ARGS:---checks gemm,alltoall --timeout 60}"

out="$(VIGIL_HOST="$NODE" VIGIL_JOB_ID="prolog-$JOB" timeout 120 \
       "$PYTHON" -m vigil.recovery.diagnostics "${ARGS[@]}" --group "$NODE" --rank 0 2>&1)"
status=$?
printf '%s\n' "$out"
if [ "${VIGIL_PROLOG_PUBLISH:-0}" = 1 ]; then  # needs the node's agent key and Kafka settings (VIGIL_*)
    printf '%s\n' "$out" | "$PYTHON" -m vigil diagnostics publish --host "$NODE" >&2 \
        || echo "vigil prolog: could not publish the diagnostics of $NODE" >&2
fi
[ "$status" -eq 0 ] && exit 0

failed="$(printf '%s\n' "$out" | grep '"ok":false' | grep -o '"test":"[a-z]*"' | cut -d'"' -f4 | grep -vx check \
          | paste -sd, -)"
reason="vigil: prolog-$JOB diagnostics failed (${failed:-exit $status}) on $NODE"
"$SCONTROL" update nodename="$NODE" state=drain reason="${reason:0:200}" \
    || echo "vigil prolog: could not drain $NODE" >&2
exit 1
