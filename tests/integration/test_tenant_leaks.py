"""Issue 40's outside review, against real processes: what a tenant's token, or no token at all,
could learn of another tenant. Each test reproduces one finding.

(``flux status --json`` naming another tenant's pending workflow is in test_tenants.py's
``test_a_tenant_sees_and_cancels_only_its_own_executions``.)
"""

from __future__ import annotations

from pathlib import Path

import grpc
import httpx
import pytest

from flux.client import FluxClient
from flux.security import Credentials, Role
from flux.testing import Cluster
from flux.v1 import control_pb2, control_pb2_grpc

from .conftest import WORKFLOWS

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc"), pytest.mark.backends("sqlite")]

# What a scraper without the metrics token must never see: a tenant label.
TENANT_LABEL = 'tenant="'


def _ok(result: object) -> str:
    assert result.returncode == 0, result.stderr  # type: ignore[attr-defined]
    return result.stdout  # type: ignore[attr-defined]


def _client(cluster: Cluster, token: str) -> FluxClient:
    return FluxClient(cluster.address, timeout=10, credentials=Credentials(token, cluster.ca))


def test_metrics_name_tenants_only_for_the_metrics_token_or_a_cluster_admin(tmp_path: Path) -> None:
    metrics_token = "prometheus-" + "x" * 32
    token_file = tmp_path / "metrics.token"
    token_file.write_text(metrics_token + "\n")
    cluster = Cluster(tmp_path / "cluster")
    (tmp_path / "cluster").mkdir()
    try:
        cluster.start_server("--metrics-token-file", str(token_file))
        cluster.register(WORKFLOWS)
        _ok(cluster.flux("tenant", "create", "ml", "--cpu", "2", "--cohort", "research"))
        ml = _ok(cluster.flux("token", "create", "--tenant", "ml")).strip()
        with _client(cluster, ml) as as_ml:
            as_ml.run("echo", 1)  # no worker: it stays pending

        def scrape(token: str = "") -> httpx.Response:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            return httpx.get(f"{cluster.gateway_url}/metrics", headers=headers, timeout=10)

        # Without a token (as the review scraped it): aggregates, and no tenant named anywhere.
        anonymous = scrape()
        assert anonymous.status_code == 200
        assert TENANT_LABEL not in anonymous.text and '"ml"' not in anonymous.text
        assert 'flux_preemptions_refused_total{reason="budget"} 0.0' in anonymous.text
        assert 'flux_pending_executions{reason="no_worker"} 1.0' in anonymous.text
        # A tenant's token is no metrics token: it sees what anyone sees.
        assert TENANT_LABEL not in scrape(ml).text
        # Prometheus with the metrics token, and a cluster admin: every tenant's series.
        for token in (metrics_token, cluster.token(Role.CLIENT)):
            text = scrape(token).text
            assert 'flux_tenant_pending{tenant="ml"} 1.0' in text
            assert 'flux_tenant_quota{resource="cpu",tenant="ml"} 2.0' in text
            assert 'flux_tenant_preemptions_refused_total{reason="budget",tenant="ml"} 0.0' in text
        # A wrong token is refused, not quietly answered with less.
        refused = scrape("not-the-metrics-token")
        assert refused.status_code == 401 and "metrics token" in refused.text

        # gRPC GetMetrics, open without a token, the same.
        with grpc.insecure_channel(cluster.address) as channel:
            stub = control_pb2_grpc.ControlServiceStub(channel)
            request = control_pb2.GetMetricsRequest()
            assert [t.name for t in stub.GetMetrics(request, timeout=10).tenants] == []
            with_token = stub.GetMetrics(
                request, metadata=(("authorization", f"Bearer {metrics_token}"),), timeout=10
            )
            assert "ml" in [t.name for t in with_token.tenants]
            as_tenant = stub.GetMetrics(request, metadata=(("authorization", f"Bearer {ml}"),), timeout=10)
            assert [t.name for t in as_tenant.tenants] == []
    finally:
        cluster.close()


def test_waiting_on_another_tenants_id_answers_as_for_a_missing_one(cluster: Cluster) -> None:
    _ok(cluster.flux("tenant", "create", "ml"))
    _ok(cluster.flux("tenant", "create", "web"))
    ml = _ok(cluster.flux("token", "create", "--tenant", "ml")).strip()
    web = _ok(cluster.flux("token", "create", "--tenant", "web")).strip()
    with _client(cluster, ml) as as_ml:
        foreign = as_ml.run("echo", "ml's").execution_id  # no worker: pending
    bogus, other_bogus = "0" * 32, "1" * 32
    if len(foreign) != 32:  # an id of the server's own form, so only existence differs
        bogus, other_bogus = "0" * len(foreign), "1" * len(foreign)

    def refusal(ids: list[str]) -> tuple[grpc.StatusCode, str]:
        with Credentials(web, cluster.ca).channel(cluster.address) as channel:
            stub = control_pb2_grpc.ControlServiceStub(channel)
            stream = stub.WaitExecutions(
                control_pb2.WaitExecutionsRequest(execution_ids=ids),
                metadata=(("authorization", f"Bearer {web}"),),
                timeout=10,
            )
            with pytest.raises(grpc.RpcError) as raised:
                next(iter(stream))
        return raised.value.code(), raised.value.details()

    # [foreign, bogus] used to be refused naming bogus: foreign passed the existence check.
    code, message = refusal([foreign, bogus])
    assert (code, message) == (grpc.StatusCode.NOT_FOUND, f"execution {foreign!r} does not exist")
    missing = refusal([other_bogus, bogus])
    assert missing == (grpc.StatusCode.NOT_FOUND, f"execution {other_bogus!r} does not exist")

    # The gateway's POST /executions/wait relays the same answer.
    def http(ids: list[str]) -> httpx.Response:
        return httpx.post(
            f"{cluster.gateway_url}/executions/wait",
            json={"execution_ids": ids},
            headers={"Authorization": f"Bearer {web}"},
            timeout=10,
        )

    foreign_answer, missing_answer = http([foreign, bogus]), http([other_bogus, bogus])
    assert foreign_answer.status_code == missing_answer.status_code == 404
    assert foreign_answer.json()["error"]["message"] == f"execution {foreign!r} does not exist"
    assert missing_answer.json()["error"]["message"] == f"execution {other_bogus!r} does not exist"
