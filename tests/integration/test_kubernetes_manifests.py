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
Kubernetes guide's (docs/guides/kubernetes.md) in-pod command run against a server started as the pod starts it, and
an image override that reaches every container.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
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
# The guide whose blocks and manifests these tests hold to the files.
KUBERNETES_PAGE = ROOT / "docs" / "guides" / "kubernetes.md"
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


# ---------------------------------------------------------------------- issue 40: the review


def deployments(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "Deployment"]


def mounts_of(deployment: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """mount path -> (volume name, volume) of the pod's only container."""
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    return {m["mountPath"]: (m["name"], volumes[m["name"]]) for m in container(deployment)["volumeMounts"]}


def secret_behind(deployment: dict[str, Any], path: str) -> tuple[str, list[str] | None]:
    """(Secret name, the keys it projects or None for all) of the mount holding file ``path``."""
    for mount, (_, volume) in mounts_of(deployment).items():
        if path.startswith(mount.rstrip("/") + "/") and "secret" in volume:
            items = volume["secret"].get("items")
            return volume["secret"]["secretName"], None if items is None else [i["key"] for i in items]
    raise AssertionError(f"{path} is on no Secret volume of {deployment['metadata']['name']}")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_container_is_given_a_database_on_its_command_line(overlay: str) -> None:
    """/proc/<pid>/cmdline is readable by every process of the node: a URL there leaks its password."""
    for deployment in deployments(render(overlay)):
        for c in deployment["spec"]["template"]["spec"]["containers"]:
            for arg in [*c.get("command", ()), *c.get("args", ())]:
                assert "://" not in arg and "$(FLUX_DB_URL)" not in arg, (c["name"], arg)
                assert arg != "--db" and not arg.startswith("--db="), (c["name"], arg)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_pod_mounts_a_service_account_token(overlay: str) -> None:
    for deployment in deployments(render(overlay)):
        assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_connection_is_tls_verified_with_the_servers_ca(overlay: str) -> None:
    objects = render(overlay)
    server = one(objects, "Deployment", "flux-server")
    args = build_parser().parse_args(container(server)["args"])
    assert (
        secret_behind(server, args.tls_cert)
        == secret_behind(server, args.tls_key)
        == ("flux-server-tls", None)
    )
    assert args.tls_cert.endswith("/tls.crt") and args.tls_key.endswith("/tls.key")
    # KEDA's client certificates are checked against the same CA (the parallel rule: a KEDA port
    # beyond loopback needs --keda-client-ca).
    assert (
        args.keda_client_ca.endswith("/ca.crt")
        and secret_behind(server, args.keda_client_ca)[0] == "flux-server-tls"
    )
    assert env_of(container(server))["FLUX_CA"] == args.keda_client_ca  # in-pod `flux` verifies with it
    for worker in deployments(objects):
        if worker is server:
            continue
        worker_args = build_parser().parse_args(
            [a.replace("$(POD_NAME)", "pod-0") for a in container(worker)["args"]]
        )
        assert worker_args.ca.endswith("/ca.crt")
        # The CA alone: a worker pod never holds the server's private key.
        assert secret_behind(worker, worker_args.ca) == ("flux-server-tls", ["ca.crt"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_keda_speaks_mtls_through_a_trigger_authentication(overlay: str) -> None:
    objects = render(overlay)
    for scaled in (o for o in objects if o["kind"] == "ScaledObject"):
        (trigger,) = scaled["spec"]["triggers"]
        assert "unsafeSsl" not in trigger["metadata"] and "enableTLS" not in trigger["metadata"]
        auth = one(objects, "TriggerAuthentication", trigger["authenticationRef"]["name"])
        refs = {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
        assert refs == {
            "caCert": ("flux-keda-client", "ca.crt"),
            "tlsClientCert": ("flux-keda-client", "tls.crt"),
            "tlsClientKey": ("flux-keda-client", "tls.key"),
        }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_workers_say_whether_their_stream_is_connected(overlay: str) -> None:
    for worker in deployments(render(overlay)):
        if worker["metadata"]["name"] == "flux-server":
            continue
        c = container(worker)
        args = build_parser().parse_args([a.replace("$(POD_NAME)", "pod-0") for a in c["args"]])
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert args.health_host == "0.0.0.0"  # the kubelet dials the pod's IP
        ready, live = c["readinessProbe"]["httpGet"], c["livenessProbe"]["httpGet"]
        assert (ready["path"], ports[ready["port"]]) == ("/readyz", args.health_port)
        assert (live["path"], ports[live["port"]]) == ("/healthz", args.health_port)


def test_cert_manager_issues_every_name_the_pods_dial() -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / "cert-manager")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    issued = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert {d["metadata"]["namespace"] for d in issued} == {"flux"}
    certificates = {d["spec"]["secretName"]: d["spec"] for d in issued if d["kind"] == "Certificate"}
    issuers = {d["metadata"]["name"] for d in issued if d["kind"] == "Issuer"}
    assert all(spec["issuerRef"]["name"] in issuers for spec in certificates.values())
    objects = render("sqlite")
    server = certificates["flux-server-tls"]
    scaled = one(objects, "ScaledObject", "flux-worker-gpu")
    worker = build_parser().parse_args(
        [
            a.replace("$(POD_NAME)", "pod-0")
            for a in container(one(objects, "Deployment", "flux-worker-gpu"))["args"]
        ]
    )
    dialled = {scaled["spec"]["triggers"][0]["metadata"]["scalerAddress"].rsplit(":", 1)[0]}
    dialled |= {address.rsplit(":", 1)[0] for address in worker.server}
    assert dialled <= set(server["dnsNames"])
    assert "127.0.0.1" in server["ipAddresses"]  # `kubectl exec … -- flux …` dials 127.0.0.1:50051
    assert server["usages"] == ["server auth"]
    keda = certificates["flux-keda-client"]
    assert keda["usages"] == ["client auth"] and keda["issuerRef"] == server["issuerRef"]
    # The Secret names the manifests use are the ones cert-manager writes.
    auth = one(objects, "TriggerAuthentication", "flux-keda")
    assert {r["name"] for r in auth["spec"]["secretTargetRef"]} == {"flux-keda-client"}


def test_the_guides_certificates_are_those_of_deploy_kubernetes_cert_manager() -> None:
    """The Kubernetes guide shows the two leaf Certificates, shortened: every field it shows is the file's."""
    from tests.integration.test_readme import parse_blocks

    shown = [
        doc
        for block in parse_blocks(KUBERNETES_PAGE.read_text())
        if block.language == "yaml" and "cert-manager.io" in block.text
        for doc in yaml.safe_load_all(block.text)
        if doc
    ]
    real = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all((DEPLOY / "cert-manager" / "tls.yaml").read_text())
        if d
    }
    assert {d["metadata"]["name"] for d in shown} == {"flux-server-tls", "flux-keda-client"}
    for doc in shown:
        spec = real[doc["metadata"]["name"]]["spec"]
        assert doc["kind"] == "Certificate" and doc["spec"].items() <= spec.items(), doc["metadata"]["name"]


IMAGE_OVERLAY = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {base}
images:
  - name: ghcr.io/flux-dispatch/flux
    newName: registry.example.com/platform/flux
    newTag: "0.1.0-rc1"
"""


def test_an_overlay_of_your_own_points_every_container_at_your_registry(tmp_path: Path) -> None:
    """What the guide's "Your own image" shows: kustomize's images: in an overlay over one of ours."""
    page = KUBERNETES_PAGE.read_text()
    assert (
        "name: ghcr.io/flux-dispatch/flux" in page and "newName: registry.example.com/platform/flux" in page
    )
    mine = tmp_path / "my-flux"
    mine.mkdir()
    base = os.path.relpath(DEPLOY / "overlays" / "sqlite", mine)  # kustomize takes relative bases
    (mine / "kustomization.yaml").write_text(IMAGE_OVERLAY.format(base=base))
    out = subprocess.run(
        ["kubectl", "kustomize", str(mine)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    images = {
        c["image"]
        for o in yaml.safe_load_all(out.stdout)
        if o and o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"registry.example.com/platform/flux:0.1.0-rc1"}


IN_POD = re.compile(r"^kubectl -n flux exec deploy/flux-server -- (flux .+)$")


def in_pod_commands() -> list[list[str]]:
    """The `flux …` argv of every `kubectl -n flux exec deploy/flux-server -- flux …` line of the Kubernetes guide."""
    from tests.integration.test_readme import commands, parse_blocks, without_comment

    found = []
    for block in parse_blocks(KUBERNETES_PAGE.read_text()):
        for line in commands(block.text) if block.runs_commands else ():
            if match := IN_POD.match(without_comment(line)):
                found.append(shlex.split(match.group(1)))
    return found


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_the_guides_in_pod_commands_run_against_a_server_started_as_the_pod_starts_it(
    tmp_path: Path,
) -> None:
    """The server container's args, env and mounts from the rendered manifest, its files laid out
    under a temporary root: the Kubernetes guide's `flux …` line, run in the pod's working directory with the
    pod's environment, finds the API token and the CA without a flag and succeeds.

    What differs from the pod, for loopback: every port is 0 (so FLUX_SERVER names the one bound,
    where the pod's default 127.0.0.1:50051 is right), --host is 127.0.0.1, and absolute paths
    (in args, env and the command) lie under the temporary root.
    """
    from flux.testing import LISTENING, plain
    from flux.testing.processes import spawn
    from tests.integration.tls import make_pki

    argvs = in_pod_commands()
    assert argvs and all(argv[0] == "flux" for argv in argvs), argvs
    objects = render("sqlite")
    server = one(objects, "Deployment", "flux-server")
    c = container(server)
    root = tmp_path / "pod"

    def here(path: str) -> str:
        return str(root / path.lstrip("/")) if path.startswith("/") else path

    # The mounted volumes: the Secrets' keys, the pools ConfigMap, the state and tmp directories.
    pki = make_pki(tmp_path / "pki")
    files = {
        "flux-tokens": {"worker-token": "w-" + os.urandom(16).hex(), "api-token": "a-" + os.urandom(16).hex()},
        "flux-server-tls": {
            "tls.crt": pki.cert.read_text(), "tls.key": pki.key.read_text(), "ca.crt": pki.ca.read_text()
        },
        "flux-pools": one(objects, "ConfigMap", "flux-pools")["data"],
    }  # fmt: skip
    for mount, (_, volume) in mounts_of(server).items():
        directory = Path(here(mount))
        directory.mkdir(parents=True, exist_ok=True)
        source = (volume.get("secret") or {}).get("secretName") or (volume.get("configMap") or {}).get("name")
        for name, content in files.get(source, {}).items():
            (directory / name).write_text(content)
    workdir = Path(here(c["workingDir"]))

    args = []
    for arg in c["args"]:
        flag, _, value = arg.partition("=")
        if flag in ("--grpc-port", "--http-port", "--keda-port"):
            value = "0"
        elif flag == "--host":
            value = "127.0.0.1"
        args.append(f"{flag}={here(value)}" if value else arg)
    pod_env = {name: here(value) for name, value in env_of(c).items()}
    # Nothing of this test's own environment that the pod would not have.
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLUX_")}
    process = spawn(workdir, args, {**base, **pod_env}, "server", None)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = LISTENING.search(plain(line))
        assert match, f"the server did not start: {line!r}; see {workdir / 'server.log'}"
        env = {**base, **pod_env, "FLUX_SERVER": f"127.0.0.1:{match.group(2)}"}
        for argv in argvs:
            ran = subprocess.run(
                [sys.executable, "-m", "flux", *map(here, argv[1:])],  # paths in the pod, under root
                cwd=workdir, env=env, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert ran.returncode == 0, f"{shlex.join(argv)} in the pod: {ran.stderr}"
        # It is the pod's environment that does it: without FLUX_API_TOKEN_FILE, no credentials.
        bare = {k: v for k, v in env.items() if k != "FLUX_API_TOKEN_FILE"}
        refused = subprocess.run(
            [sys.executable, "-m", "flux", "pool", "list"], cwd=workdir, env=bare, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert refused.returncode != 0 and "missing credentials" in refused.stderr
    finally:
        process.kill()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
