"""deploy/kubernetes and the Dockerfile, checked offline: no cluster here.

Every overlay is rendered by ``kubectl kustomize``; every object is validated
against the Kubernetes schemas (kubernetes-validate, strict: an unknown field
fails) and the ScaledObjects against KEDA's own CRD schema (vendored under
tests/schemas/keda). Then what a schema cannot see: probes, resource limits,
ports and flags that agree with what the server and workers are started with
(parsed by the real CLI parser), the drain inside the grace period, the pool
declaration in step with its worker Deployment, and issue 40's review: no
database URL on a command line, TLS between every pod (KEDA's with a client
certificate), no ServiceAccount token in a pod, probes on the workers, the
README's in-pod command run against a server started as the pod starts it, and
an image override that reaches every container.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from flux.cli.parser import build_parser
from flux.domain.quantity import parse_bytes
from flux.matching.pools import parse_pools
from flux.server.serve import resolve_db

# The dev extra installs kubernetes-validate, which brings PyYAML and jsonschema.
kubernetes_validate = pytest.importorskip("kubernetes_validate")
yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(p.parent.name for p in (DEPLOY / "overlays").glob("*/kustomization.yaml"))
KUBERNETES = "1.32.0"
SCALED_OBJECT_CRD = ROOT / "tests" / "schemas" / "keda" / "keda.sh_scaledobjects.yaml"

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl renders the overlays")


def render(overlay: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def flags(args: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def env_of(c: dict[str, Any]) -> dict[str, str]:
    """The container's literal environment (valueFrom entries are the kubelet's to fill)."""
    return {e["name"]: e["value"] for e in c.get("env", ()) if "value" in e}


POSTGRES_URL = "postgresql://flux:s3cret@db.internal:5432/flux"


def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load(SCALED_OBJECT_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["served"] and v["storage"]]
    return version["schema"]["openAPIV3Schema"]


def test_every_overlay_is_found():
    assert OVERLAYS == ["postgres-replicas", "sqlite"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_is_valid_against_its_schema(overlay: str) -> None:
    objects = render(overlay)
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "Service", "PodDisruptionBudget", "ScaledObject", "ConfigMap"} <= kinds
    keda = crd_schema()
    for obj in objects:
        if obj["kind"] == "TriggerAuthentication":
            # No vendored schema for it: the fields KEDA reads, checked in test_keda_speaks_mtls.
            assert obj["apiVersion"] == "keda.sh/v1alpha1" and set(obj["spec"]) == {"secretTargetRef"}
        elif obj["apiVersion"].startswith("keda.sh/"):
            assert obj["kind"] == "ScaledObject"
            jsonschema.validate(obj, keda)
        else:
            kubernetes_validate.validate(obj, KUBERNETES, strict=True)


def test_the_keda_schema_catches_a_bad_scaled_object() -> None:
    """The vendored schema is really applied: a wrong type fails."""
    scaled = one(render("sqlite"), "ScaledObject", "flux-worker-gpu")
    scaled["spec"]["minReplicaCount"] = "zero"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(scaled, crd_schema())
    bad = one(render("sqlite"), "Deployment", "flux-server")
    bad["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSeconds"] = "five"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_server_ports_probes_and_flags_agree(overlay: str, tmp_path: Path) -> None:
    objects = render(overlay)
    server = one(objects, "Deployment", "flux-server")
    c = container(server)
    assert c["args"][:2] == ["start", "server"]
    args = build_parser().parse_args(c["args"])  # the real parser: every flag exists and parses
    # Where the state lives, as the server resolves it, with the Secret's file written here.
    (tmp_path / "url").write_text(POSTGRES_URL + "\n")
    db = resolve_db(args.db, args.db_file and str(tmp_path / "url"), env_of(c))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"grpc": args.grpc_port, "http": args.http_port, "keda": args.keda_port}
    assert args.host == "0.0.0.0"
    # Readiness and liveness: the gateway's /healthz (the core's gRPC health service) over HTTPS;
    # the kubelet's gRPC probe cannot speak TLS.
    for probe in (c["readinessProbe"], c["livenessProbe"]):
        assert probe["httpGet"]["path"] == "/healthz" and probe["httpGet"]["scheme"] == "HTTPS"
        assert ports[probe["httpGet"]["port"]] == args.http_port
    service = one(objects, "Service", "flux-server")
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {n: n for n in ports}
    assert service["spec"]["selector"].items() <= server["spec"]["template"]["metadata"]["labels"].items()
    # Tokens from the Secret, never generated into an ephemeral directory.
    volumes = {v["name"]: v for v in server["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert volumes["tokens"]["secret"]["secretName"] == "flux-tokens"
    assert args.worker_token_file.startswith(mounts["tokens"]) and args.api_token_file.startswith(
        mounts["tokens"]
    )
    if overlay == "sqlite":
        assert server["spec"]["replicas"] == 1 and server["spec"]["strategy"]["type"] == "Recreate"
        assert volumes["state"]["persistentVolumeClaim"]["claimName"] == "flux-state"
        one(objects, "PersistentVolumeClaim", "flux-state")
        assert db.startswith(mounts["state"])
    else:
        assert server["spec"]["replicas"] >= 2 and db == POSTGRES_URL
        assert volumes["db"]["secret"]["secretName"] == "flux-postgres"
        assert args.db_file.startswith(mounts["db"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_has_requests_limits_and_runs_unprivileged(overlay: str) -> None:
    for obj in render(overlay):
        if obj["kind"] != "Deployment":
            continue
        pod = obj["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, obj["metadata"]["name"]
        for c in pod["containers"]:
            resources = c["resources"]
            assert {"cpu", "memory"} <= resources["requests"].keys() <= resources["limits"].keys(), c["name"]
            assert c["securityContext"]["allowPrivilegeEscalation"] is False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pool_deployment_scaled_object_and_declaration_agree(overlay: str) -> None:
    objects = render(overlay)
    server_args = build_parser().parse_args(container(one(objects, "Deployment", "flux-server"))["args"])
    for scaled in (o for o in objects if o["kind"] == "ScaledObject"):
        target = one(objects, "Deployment", scaled["spec"]["scaleTargetRef"]["name"])
        (trigger,) = scaled["spec"]["triggers"]
        assert trigger["type"] in ("external", "external-push")
        host, port = trigger["metadata"]["scalerAddress"].rsplit(":", 1)
        assert host.startswith("flux-server.") and int(port) == server_args.keda_port
        c = container(target)
        args = build_parser().parse_args([a.replace("$(POD_NAME)", "pod-0") for a in c["args"]])
        assert trigger["metadata"]["pool"] == args.pool
        # The drain ends inside the grace period the kubelet gives before SIGKILL.
        grace = target["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert args.drain_timeout + 10 <= grace
        # A PodDisruptionBudget covers the pool's pods.
        labels = target["spec"]["template"]["metadata"]["labels"]
        assert any(
            p["kind"] == "PodDisruptionBudget"
            and p["spec"]["selector"]["matchLabels"].items() <= labels.items()
            for p in objects
        )
        # The declaration (ConfigMap) says what these pods are: the limits the cgroup probe reads.
        document = yaml.safe_load(one(objects, "ConfigMap", "flux-pools")["data"]["pools.json"])
        (spec,) = [p for p in parse_pools(document) if p.name == args.pool]
        limits = c["resources"]["limits"]
        assert spec.cpu == int(limits["cpu"]) and spec.memory == parse_bytes(limits["memory"], "memory")
        assert spec.gpu == int(limits.get("nvidia.com/gpu", 0)) and spec.capacity == args.capacity
        assert spec.max_workers == scaled["spec"]["maxReplicaCount"]
        assert spec.min_workers == scaled["spec"]["minReplicaCount"]
        assert dict(spec.labels).items() <= dict(args.label).items()


def test_dockerfile_is_multi_stage_pinned_and_unprivileged() -> None:
    text = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert len(stages) >= 2
    (base,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)", text, re.M)
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", base), base
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert users[-1].split(":")[0] == "10001"  # the manifests' runAsUser
    exposed = {int(p) for line in re.findall(r"^EXPOSE\s+(.+)$", text, re.M) for p in line.split()}
    server = one(render("sqlite"), "Deployment", "flux-server")
    assert exposed == {p["containerPort"] for p in container(server)["ports"]}
    assert container(server)["image"].startswith("ghcr.io/flux-dispatch/flux:")
