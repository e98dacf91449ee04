"""`vigil keys create|issue|rotate|retire|list`: the signing key set (see vigil.signing and README "Threat model").

`create` makes a key pair for every service role that has none (what `vigil up` and `make demo` do);
`issue HOST` gives a host's agent its own key (the one it attests that host's facts with; `make demo`
issues one per demo host), `rotate agent --host HOST` replaces it;
`rotate ROLE` makes a new key id current for the role, keeping the old public key listed so
what it signed still verifies; `retire ROLE KEY_ID` stops accepting an old key. Key material is
never printed: `list` shows roles, key ids, which is current and where a private key is held;
`export-k8s -o DIR` writes the Kubernetes Secrets deploy/k8s/ mounts (one per role with its private
key, one with every public key; files mode 0600) for `kubectl apply -f DIR`.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from vigil.settings import VigilSettings

ROLES = ["controller", "analyzer", "operator", "agent"]


def register(sub: Any) -> None:
    p = sub.add_parser("keys", help="the signing keys of the controller, analyzer and operator roles")
    ksub = p.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    c = ksub.add_parser("create", help="a key pair for every role that has none")
    c.set_defaults(handler=cmd_create)
    i = ksub.add_parser("issue", help="a key of its own for each HOST's agent (where it has none)")
    i.add_argument("hosts", nargs="+", metavar="HOST", help="the host names the agents run as (`vigil run --host`)")
    i.set_defaults(handler=cmd_issue)
    r = ksub.add_parser("rotate", help="a new current key for ROLE; the old public key stays accepted")
    r.add_argument("role", choices=ROLES, help="the role to rotate")
    r.add_argument("--host", default="", help="agent: the host whose key to rotate")
    r.set_defaults(handler=cmd_rotate)
    t = ksub.add_parser("retire", help="stop accepting an old key of ROLE")
    t.add_argument("role", choices=ROLES, help="the role the key belongs to")
    t.add_argument("key_id", help="the key id to retire (`vigil keys list`)")
    t.set_defaults(handler=cmd_retire)
    ls = ksub.add_parser("list", help="roles, key ids, current keys (no key material)")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(handler=cmd_list)
    x = ksub.add_parser("export-k8s", help="the key set as Kubernetes Secrets (files mode 0600) for kubectl apply")
    x.add_argument("-o", "--output", type=Path, required=True, help="directory to write the Secret manifests to")
    x.add_argument("--namespace", default="vigil", help="namespace of the Secrets (default: vigil)")
    x.set_defaults(handler=cmd_export_k8s)


def _store() -> Any:
    from vigil.signing.setup import key_store

    return key_store(VigilSettings.load().home)


def cmd_create(args: argparse.Namespace) -> int:
    store = _store()
    for role, kid in store.ensure().items():
        print(f"{role.value}: {kid}")
    print(f"key set in {store.directory} (private keys mode 0600)")
    return 0


def cmd_issue(args: argparse.Namespace) -> int:
    store = _store()
    for host in args.hosts:
        print(f"agent of {host}: {store.issue(host)}")
    print(f"give each host's agent only its own agent.<host>+<key id>.key from {store.directory}")
    return 0


def cmd_rotate(args: argparse.Namespace) -> int:
    from vigil.signing import Role

    if (args.role == "agent") != bool(args.host):
        print("vigil keys rotate: an agent key is rotated per host (--host HOST), and only an agent key")
        return 2
    store = _store()
    kid = store.rotate(Role(args.role), args.host)
    print(f"{args.role}: new current key {kid}; restart the {args.role}'s services to sign with it; "
          f"retire the old key once nothing signs with it (`vigil keys retire {args.role} OLD_ID`)")
    return 0


def cmd_retire(args: argparse.Namespace) -> int:
    from vigil.signing import Role

    _store().retire(Role(args.role), args.key_id)
    print(f"{args.role}: key {args.key_id} retired")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    store = _store()
    rows = [{"role": k.role.value, "key_id": k.key_id, "current": k.current, "private": k.private}
            for k in store.listing()]
    if args.json:
        print(json.dumps({"directory": str(store.directory), "keys": rows}))
        return 0
    print(f"keys in {store.directory}")
    for r in rows:
        print(f"  {r['role']:<10} {r['key_id']}  {'current' if r['current'] else '       '}  "
              f"{'private key here' if r['private'] else 'public only'}")
    return 0


def cmd_export_k8s(args: argparse.Namespace) -> int:
    from vigil.signing.export import kubernetes_secrets

    docs = kubernetes_secrets(_store(), args.namespace)
    out: Path = args.output
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name, doc in docs.items():
        path = out / f"{name}.json"  # kubectl applies JSON manifests as it does YAML
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=2)
    print(f"{len(docs)} Secrets in {out} (namespace {args.namespace}): {', '.join(docs)}; "
          f"kubectl apply -f {out}, then restart the role's services after a rotation")
    return 0
