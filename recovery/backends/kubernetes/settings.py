"""How the Kubernetes backend reaches the API server and what it writes on nodes: its settings section."""

from __future__ import annotations

import os
from typing import Any, Literal

from kubernetes import client, config
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from vigil.errors import one_line
from vigil.recovery.errors import BackendError


class KubernetesSettings(BaseModel):
    """How the controller reaches the API server and what it writes on nodes (`backend = "kubernetes"`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api_url: str = Field(default="", description="API server URL with `token` (tests, no kubeconfig); "
                                                "empty: in-cluster service account in a pod, else kubeconfig")
    token: SecretStr | None = Field(default=None, description="bearer token for api_url")
    ca_file: str = Field(default="", description="CA bundle for api_url (empty: the system's)")
    verify_tls: bool = True
    kubeconfig: str = Field(default="", description="kubeconfig path (empty: $KUBECONFIG or ~/.kube/config)")
    context: str = Field(default="", description="kubeconfig context (empty: its current one)")
    request_timeout_s: float = Field(default=15.0, gt=0, description="per API request")
    node_map: dict[str, str] = Field(default_factory=dict, description="host -> node name, checked first")
    node_label: str = Field(default="", description="node label whose value is the host (e.g. "
                                                    "kubernetes.io/hostname); empty: node name = host")
    key_prefix: str = Field(default="vigil.io/", description="prefix of vigil's annotations and label")
    taint_key: str = "vigil.io/faulty"
    taint_effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"
    device_taints: bool = Field(default=True, description="a GPU quarantine as DRA device taint rules where the API "
                                "server serves resource.k8s.io devicetaintrules (else: a node label + cordon)")
    dra_driver: str = Field(default="gpu.nvidia.com", description="the DRA driver whose devices are tainted")
    dra_device: str = Field(default="gpu-{index}", description="the DRA device name of GPU {index} (NVML's index)")
    pod_namespace: str = Field(default="", description="namespace of the jobs' pods (empty: all namespaces)")
    pod_selector: str = Field(default="vigil.io/job={job}", description="label selector of a job's pods; "
                                                                        "{job} is the job id")
    evict_timeout_s: float = Field(default=300.0, gt=0, description="bound on one evict: PDB retries and "
                                                                    "waiting for the pods to go")
    evict_retry_s: float = Field(default=5.0, gt=0, description="first wait after a PDB 429 (doubles)")
    evict_retry_max_s: float = Field(default=30.0, gt=0, description="longest wait between eviction tries")
    evict_grace_s: int | None = Field(default=None, ge=0, description="pods' termination grace (None: their own)")
    wait_deleted: bool = Field(default=True, description="evict returns once the evicted pods are gone")
    conflict_retries: int = Field(default=5, ge=0, description="re-read and re-patch a node changed meanwhile")


def api_client(settings: KubernetesSettings) -> Any:
    """An `ApiClient` for the settings: explicit URL and token, in-cluster, or kubeconfig."""
    conf = client.Configuration()
    try:
        if settings.api_url:
            conf.host = settings.api_url.rstrip("/")
            if settings.token is not None:
                conf.api_key = {"authorization": "Bearer " + settings.token.get_secret_value()}
            conf.verify_ssl = settings.verify_tls
            conf.ssl_ca_cert = settings.ca_file or None
        elif not settings.kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=conf)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=settings.kubeconfig or None, context=settings.context or None,
                client_configuration=conf, persist_config=False)
    except (config.ConfigException, OSError, ValueError) as exc:
        raise BackendError(f"kubernetes backend: no API server configuration: {one_line(exc)}") from None
    return client.ApiClient(conf)

