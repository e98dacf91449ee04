#!/usr/bin/env bash
# Kafka ACLs per vigil role: one SASL principal per role (User:vigil-<role>), each allowed only the
# topics its role reads and writes (topic names: vigil/contract/registry.py, prefix VIGIL_TOPIC_PREFIX).
# A template: review it, then run with an admin client config, e.g.
#   BOOTSTRAP=kafka-0.kafka.kafka.svc:9093 ADMIN_CONFIG=admin.properties deploy/kafka-acls.sh
# Training code never holds any of these credentials (`vigil run` strips VIGIL_* secrets from the
# child's environment), so the broker can tell the agent from user code.
set -euo pipefail
: "${BOOTSTRAP:?set BOOTSTRAP}" "${ADMIN_CONFIG:?set ADMIN_CONFIG (a client config with admin rights)}"
PREFIX="${VIGIL_TOPIC_PREFIX:-vigil.}"

acl() {  # acl ROLE OPERATION TOPIC...
  local role=$1 op=$2; shift 2
  for topic in "$@"; do
    kafka-acls.sh --bootstrap-server "$BOOTSTRAP" --command-config "$ADMIN_CONFIG" --add \
      --allow-principal "User:vigil-$role" --operation "$op" --topic "$PREFIX$topic"
  done
  # consumer groups: vigil's are all named vigil-...
  kafka-acls.sh --bootstrap-server "$BOOTSTRAP" --command-config "$ADMIN_CONFIG" --add \
    --allow-principal "User:vigil-$role" --operation Read --group vigil- --resource-pattern-type prefixed
}

TELEMETRY=(jobs steps heartbeats nic logs collectives)
# node agent: writes telemetry and its own recovery facts (member, diagnostic, checkpoint, acks); reads commands
acl agent Write "${TELEMETRY[@]}" recovery
acl agent Read commands
# analyzer (ingest and detection): reads telemetry and decisions to store them; writes alerts, incidents, dead letters
acl analyzer Read "${TELEMETRY[@]}" alerts incidents silences recovery commands
acl analyzer Write alerts incidents deadletter
# recovery controller: reads triggers and its own log; writes commands and recovery steps
acl recovery Read incidents alerts recovery commands
acl recovery Write commands recovery
# dashboard: reads what it shows; writes operator requests and silences
acl dashboard Read "${TELEMETRY[@]}" alerts incidents silences recovery commands
acl dashboard Write recovery silences
# notifier: reads what it notifies about; writes silences
acl notify Read alerts incidents silences recovery
acl notify Write silences
# admin (the migrate job): creates the topics
kafka-acls.sh --bootstrap-server "$BOOTSTRAP" --command-config "$ADMIN_CONFIG" --add \
  --allow-principal "User:vigil-admin" --operation Create --operation Describe --cluster
