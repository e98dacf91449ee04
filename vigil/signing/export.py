"""The key set as Kubernetes Secrets: one per role holding its private key, one with every public key.

`kubernetes_secrets(store, namespace)` returns the Secret manifests deploy/k8s/ expects:

* ``vigil-signing-public``: every listed ``<role>.<key id>.pub`` (a file each, mounted read-only at
  ``/etc/vigil/keys`` in every service that verifies; `VIGIL_SIGNING_KEYS_DIR` points there), so
  retired keys disappear and rotated ones are accepted on the next re-read;
* ``vigil-signing-<role>`` for every role: the role's current private key as
  `VIGIL_SIGNING_PRIVATE_KEY` (PEM) and `VIGIL_SIGNING_KEY_ID`, given (``envFrom``) only to that
  role's service: the recovery controller, the detecting analyzer, the dashboard;
* ``vigil-signing-agent-<host>`` for every host with an agent key (`vigil keys issue HOST`): that
  host's own key, for the identity-holding agent on that node only (one Secret per node: mount it
  in the node's agent container, never in a training container).

Pure: reads the key store, returns dicts; `vigil keys export-k8s` writes them (mode 0600).
"""

from __future__ import annotations

from typing import Any

from vigil.signing.keys import SERVICES, KeyStore, KeyStoreError, Role

PUBLIC_SECRET = "vigil-signing-public"


def role_secret(role: Role) -> str:
    return f"vigil-signing-{role.value}"


def host_secret(host: str) -> str:
    """The Secret of `host`'s agent key (a DNS-1123 name: lower case, '_' as '-')."""
    return f"vigil-signing-agent-{host.lower().replace('_', '-')}"[:253].rstrip("-.")


def _secret(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "vigil"}},
            "stringData": data}


def kubernetes_secrets(store: KeyStore, namespace: str) -> dict[str, dict[str, Any]]:
    """Secret name -> manifest; KeyStoreError when a role has no current private key here."""
    public = {f"{role.value}.{kid}.pub": (store.directory / f"{role.value}.{kid}.pub").read_text()
              for role, kid in sorted(store.public_keys())}
    if not public:
        raise KeyStoreError(f"no public keys in {store.directory} (run `vigil keys create`)")
    out = {PUBLIC_SECRET: _secret(PUBLIC_SECRET, namespace, public)}
    for role in SERVICES:
        kid, _ = store.private_key(role)  # checks it is a readable Ed25519 key
        pem = (store.directory / f"{role.value}.{kid}.key").read_text()
        out[role_secret(role)] = _secret(role_secret(role), namespace,
                                         {"VIGIL_SIGNING_PRIVATE_KEY": pem, "VIGIL_SIGNING_KEY_ID": kid})
    for host in store.hosts():
        name = host_secret(host)
        if name in out:
            raise KeyStoreError(f"hosts whose names differ only in case or '_' / '-' share the Secret {name}")
        kid, _ = store.private_key(Role.AGENT, host)
        pem = (store.directory / f"{Role.AGENT.value}.{kid}.key").read_text()
        out[name] = _secret(name, namespace, {"VIGIL_SIGNING_PRIVATE_KEY": pem, "VIGIL_SIGNING_KEY_ID": kid})
    return out
