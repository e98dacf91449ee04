"""The deploy manifests run commands the `vigil` CLI accepts, only one analyzer detects, one notifier runs;
every pod is non-root, no default password ships, each role has its own Kafka principal, only the
ingress controller reaches the dashboard."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from vigil.app.cli.main import build_parser
from vigil.notify.settings import NotifySettings

pytestmark = pytest.mark.pure

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def k8s_docs() -> list[dict[str, Any]]:
    return [d for f in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def k8s_containers() -> list[dict[str, Any]]:
    docs = k8s_docs()
    out = []
    for d in docs:
        spec = d.get("spec", {})
        pod = spec.get("template", {}).get("spec") or spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec")
        for c in (pod or {}).get("containers", []):
            out.append({"kind": d["kind"], "name": d["metadata"]["name"], "replicas": spec.get("replicas"), **c})
    return out


def test_every_container_command_parses() -> None:
    parser = build_parser()
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    commands = [c["args"] for c in k8s_containers() if "args" in c]
    commands += [s["command"] for name, s in compose["services"].items() if "build" in s and "command" in s]
    assert len(commands) >= 6
    for argv in commands:
        args = parser.parse_args(argv)  # SystemExit (a failed test) on an unknown command or flag
        assert callable(args.handler), argv


def test_detecting_analyzers_are_sharded_by_job() -> None:
    analyzers = [c for c in k8s_containers() if c.get("args", [None])[0] == "analyzer"]
    (detecting,) = [c for c in analyzers if "--ingest-only" not in c["args"]]
    # several replicas only as shards: each job judged by one of them (analyzer/README.md "Sharding")
    assert detecting["replicas"] > 1
    assert {"name": "VIGIL_ANALYZER_DETECT_SHARDS", "value": "true"} in detecting["env"]


def test_exactly_one_notifier_recreated_on_rollout() -> None:
    docs = k8s_docs()
    (notify,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "vigil-notify"]
    assert notify["spec"]["replicas"] == 1 and notify["spec"]["strategy"] == {"type": "Recreate"}
    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "vigil-notify"]
    notify_table = tomllib.loads(config["data"]["vigil.toml"])["notify"]
    assert {r for route in notify_table["routes"] for r in route["receivers"]} == set(notify_table["receivers"])
    assert all(not any(k in r for k in ("secret", "routing_key", "url")) for r in notify_table["receivers"].values())
    assert NotifySettings.model_fields.keys() >= set(notify_table)


def test_recovery_controller_is_one_replica_with_the_rbac_its_backend_uses() -> None:
    docs = k8s_docs()
    [deployment] = [d for d in docs if d["kind"] == "Deployment" and
                    [c.get("args", [None])[0] for c in d["spec"]["template"]["spec"]["containers"]] == ["recovery"]]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    [binding] = [d for d in docs if d["kind"] == "ClusterRoleBinding" and
                 {"kind": "ServiceAccount", "name": account, "namespace": "vigil"} in d["subjects"]]
    [role] = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == binding["roleRef"]["name"]]
    granted = {(r, v) for rule in role["rules"] if rule["apiGroups"] == [""] for r in rule["resources"] for v in rule["verbs"]}
    # what vigil.recovery.backends.kubernetes calls: read/list/patch nodes, list pods, create evictions
    assert {("nodes", "get"), ("nodes", "list"), ("nodes", "patch"), ("pods", "list"), ("pods/eviction", "create")} <= granted
    assert not {v for r, v in granted} & {"delete", "deletecollection", "update", "*"}


def _run_as_other_uid(pod: dict[str, Any]) -> bool:
    """The `vigil run --user` training pod (training.yaml): the agent must be root to start the command as another
    uid, so the pod is root, but its one container holds only SETUID/SETGID and the command's uid is not 0."""
    (c,) = pod["containers"]
    args = c.get("args", [])
    return (args[:2] == ["run", "--user"] and args[2] != "0" and "--group" in args
            and c["securityContext"]["capabilities"]["add"] == ["SETUID", "SETGID"])


def test_every_pod_runs_non_root_without_privilege_escalation() -> None:
    assert "USER 10001" in (DEPLOY / "Dockerfile").read_text()
    pods = [d["spec"]["template"]["spec"] for d in k8s_docs() if d["kind"] in ("Deployment", "DaemonSet", "Job")]
    assert len(pods) >= 8
    exempt = [pod for pod in pods if pod["securityContext"]["runAsUser"] == 0]
    assert len(exempt) == 1 and _run_as_other_uid(exempt[0])  # the exemption: the `--user` shape, and only it
    for pod in pods:
        assert pod in exempt or (pod["securityContext"]["runAsNonRoot"] is True
                                 and pod["securityContext"]["runAsUser"] != 0)
        for c in pod["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_no_default_password_ships_and_each_role_gets_only_its_own_kafka_principal() -> None:
    docs = k8s_docs()
    assert not [d for d in docs if d["kind"] == "Secret"]  # operators create them; none with a default value
    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "vigil"]
    assert not any(k.startswith(("VIGIL_CLICKHOUSE_DSN", "VIGIL_KAFKA_EXTRA")) for k in config["data"])
    compose = (DEPLOY / "compose.yaml").read_text()
    assert "CLICKHOUSE_PASSWORD: ${VIGIL_CLICKHOUSE_PASSWORD:?" in compose and "vigil:vigil@" not in compose
    acls = (DEPLOY / "kafka-acls.sh").read_text()
    for c in k8s_containers():
        secrets = [ref["secretRef"]["name"] for ref in c["envFrom"] if "secretRef" in ref]
        kafka = [s for s in secrets if s.startswith("vigil-kafka-")]
        assert len(kafka) == 1, c["name"]
        role = kafka[0].removeprefix("vigil-kafka-")
        assert "User:vigil-$role" in acls and (f"topics {role} " in acls or role == "admin")
        assert ("vigil-clickhouse" in secrets) == (c["name"] not in NODE_AGENTS)  # node agents hold no store credential


def test_only_the_ingress_controller_reaches_the_dashboard() -> None:
    (policy,) = [d for d in k8s_docs() if d["kind"] == "NetworkPolicy"]
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app": "vigil-dashboard"}}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 8050, "protocol": "TCP"}] and all("namespaceSelector" in f for f in rule["from"])


SIGNERS = {"recovery": "controller", "analyzer": "analyzer", "dashboard": "operator"}  # container -> its role
NODE_AGENTS = {"collector", "train"}  # the DaemonSet's agent, and `vigil run --user` in a training pod


def test_each_role_gets_only_its_own_private_key_and_every_service_the_public_keys() -> None:
    docs = k8s_docs()
    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "vigil"]
    keys_dir = config["data"]["VIGIL_SIGNING_KEYS_DIR"]
    pods = {c["name"]: d["spec"]["template"]["spec"] for d in docs if d["kind"] in ("Deployment", "DaemonSet")
            for c in d["spec"]["template"]["spec"]["containers"]}
    pods_by_job = {(d["kind"], c["name"]): d["spec"]["template"]["spec"] for d in docs if d["kind"] == "Job"
                   for c in d["spec"]["template"]["spec"]["containers"]}
    for c in k8s_containers():
        signing = [ref["secretRef"]["name"] for ref in c["envFrom"] if "secretRef" in ref
                   and ref["secretRef"]["name"].startswith("vigil-signing-")]
        role = SIGNERS.get(c["name"]) if "--ingest-only" not in c.get("args", []) else None
        if c["name"] == "train":  # a training pod's agent: the key of the node it is pinned to, no other
            role = f"agent-{pods_by_job[c['kind'], c['name']]['nodeSelector']['kubernetes.io/hostname']}"
        assert signing == ([f"vigil-signing-{role}"] if role else []), c["name"]
        assert "vigil-signing-public" not in signing  # public keys travel as files, never as env
        if c["kind"] == "Job":
            continue  # the migration verifies nothing
        (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == keys_dir]
        assert mount["readOnly"] is True
        (volume,) = [v for v in pods[c["name"]]["volumes"] if v["name"] == mount["name"]]
        assert volume == {"name": mount["name"], "secret": {"secretName": "vigil-signing-public"}}
    assert {c["name"] for c in k8s_containers() if c["kind"] != "Job"} >= {"collector", "notify", *SIGNERS}


def test_vigil_keys_export_k8s_writes_the_secrets_the_manifests_name(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "VIGIL_HOME": str(tmp_path / "home")}
    env.pop("VIGIL_SIGNING_KEYS_DIR", None)
    for argv in (["keys", "create"], ["keys", "rotate", "controller"], ["keys", "issue", "node-1", "Node_2"],
                 ["keys", "export-k8s", "-o", str(tmp_path / "k")]):
        done = subprocess.run([sys.executable, "-m", "vigil", *argv], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "PRIVATE KEY" not in done.stdout + done.stderr
    written = {p.name: json.loads(p.read_text()) for p in (tmp_path / "k").iterdir()}
    assert all((tmp_path / "k" / n).stat().st_mode & 0o077 == 0 for n in written)
    referenced = {ref["secretRef"]["name"] for c in k8s_containers() for ref in c["envFrom"] if "secretRef" in ref
                  and ref["secretRef"]["name"].startswith("vigil-signing-")} | {"vigil-signing-public"}
    # one per node: each host's own agent key, for the identity-holding agent on that node only
    agents = {"vigil-signing-agent-node-1", "vigil-signing-agent-node-2"}
    assert {d["metadata"]["name"] for d in written.values()} == referenced | agents
    node = written["vigil-signing-agent-node-1.json"]["stringData"]
    assert node["VIGIL_SIGNING_KEY_ID"].startswith("node-1+") and "BEGIN PRIVATE KEY" in node["VIGIL_SIGNING_PRIVATE_KEY"]
    public = written["vigil-signing-public.json"]["stringData"]
    assert sorted(n.split(".")[0] for n in public) == ["agent", "agent", "analyzer", "controller", "controller",
                                                        "operator"]
    assert not any("PRIVATE" in v for v in public.values())  # the rotated-out controller key still verifies
    controller = written["vigil-signing-controller.json"]["stringData"]
    assert "BEGIN PRIVATE KEY" in controller["VIGIL_SIGNING_PRIVATE_KEY"]
    assert f"controller.{controller['VIGIL_SIGNING_KEY_ID']}.pub" in public


AGENT_PYTHON = "/usr/local/bin/vigil-agent-python"


def test_the_node_agent_reads_the_kernel_log_as_non_root_with_cap_syslog_or_the_journal() -> None:
    """The DaemonSet's agent, uid 10001: Kubernetes gives a non-root container no ambient capabilities, so
    CAP_SYSLOG (for /dev/kmsg under kernel.dmesg_restrict=1) is effective only through a file capability: the
    agent runs the image's interpreter copy that carries cap_syslog+ep, and no other container runs it. The
    journald fallback has journalctl in the image and the node's journal, volatile and persistent, and its
    machine id mounted read-only where journalctl looks for them."""
    (ds,) = [d for d in k8s_docs() if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "vigil-collector"]
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG"]}
    assert c["command"] == [AGENT_PYTHON, "-m", "vigil"] and c["args"] == ["collector"]
    assert [x["name"] for x in k8s_containers() if AGENT_PYTHON in x.get("command", [])] == ["collector"]
    docker = (DEPLOY / "Dockerfile").read_text()
    assert f"cp /usr/local/bin/python3.11 {AGENT_PYTHON}" in docker
    assert f"setcap cap_syslog+ep {AGENT_PYTHON}" in docker
    assert docker.count("setcap ") == 1  # python3.11 itself stays plain: every other pod drops ALL
    install = next(line for line in docker.splitlines() if "apt-get install" in line).split()
    assert "--no-install-recommends" in install and "systemd" in install  # Debian's journalctl
    env = {e["name"]: e.get("value") for e in c["env"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    expected = {env["VIGIL_KMSG_PATH"]: ("/dev/kmsg", "CharDevice"),
                "/var/log/journal": ("/var/log/journal", "DirectoryOrCreate"),
                "/run/log/journal": ("/run/log/journal", "DirectoryOrCreate"),
                "/etc/machine-id": ("/etc/machine-id", "File")}
    for path, (host_path, kind) in expected.items():
        assert mounts[path]["readOnly"] is True, path
        assert volumes[mounts[path]["name"]]["hostPath"] == {"path": host_path, "type": kind}
