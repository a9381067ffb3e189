"""Tokens with a life, tenants' internal ids and the audit trail (issue 40), against real servers.

Each test reproduces a finding of the security review: tokens that never expired and could not
be listed or revoked, a tenant created again under an old name that saw the old one's
executions, administrative changes that left no trace.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from flux.client import FluxClient
from flux.dispatcher.state.tenants import digest
from flux.errors import NotFound, PermissionDenied, Unauthenticated
from flux.security import Credentials
from flux.testing import Cluster, eventually

from .conftest import WORKFLOWS

pytestmark = [
    pytest.mark.integration,
    pytest.mark.backends("sqlite", "postgres"),
    pytest.mark.transports("grpc"),
]


def _ok(result: object) -> str:
    assert result.returncode == 0, result.stderr  # type: ignore[attr-defined]
    return result.stdout  # type: ignore[attr-defined]


def _client(cluster: Cluster, token: str) -> FluxClient:
    return FluxClient(cluster.address, timeout=10, credentials=Credentials(token, cluster.ca))


def test_tokens_are_listed_without_secrets_and_revoked_at_once(cluster: Cluster) -> None:
    _ok(cluster.flux("tenant", "create", "ml"))
    made = cluster.flux(
        "token", "create", "--tenant", "ml", "--role", "read", "--name", "ci", "--expires-in", "30d"
    )
    token = _ok(made).strip()
    assert "\n" not in token and "of tenant ml (read, expires" in made.stderr
    listed = _ok(cluster.flux("token", "list", "--json"))
    assert token not in listed and digest(token) not in listed
    [info] = json.loads(listed)["tokens"]
    assert (info["name"], info["tenant"], info["role"]) == ("ci", "ml", "read")
    assert info["expires_at"] == pytest.approx(info["created_at"] + 30 * 86400, abs=2)
    table = _ok(cluster.flux("token", "list", "--tenant", "ml"))
    assert info["id"] in table and "LAST USED" in table and token not in table

    with _client(cluster, token) as reader:
        assert reader.list_executions().executions == []
        # Last use is recorded (to the minute), never more than once a minute.
        eventually(lambda: cluster.client.tenants.list_tokens("ml")[0].last_used_at, what="last use recorded")
        assert "revoked" in _ok(cluster.flux("token", "revoke", info["id"]))
        with pytest.raises(Unauthenticated, match="revoked"):
            reader.list_executions()
    assert cluster.client.tenants.list_tokens() == []
    again = cluster.flux("token", "revoke", info["id"])
    assert again.returncode != 0 and f"token '{info['id']}' does not exist" in again.stderr

    # HTTP: the same, through the gateway.
    minted = cluster.client.tenants.create_token("ml", role="submit", name="web-ui")
    operator = {"Authorization": f"Bearer {cluster.client.credentials.token}"}
    with httpx.Client(base_url=cluster.gateway_url, headers=operator, timeout=10) as http:
        tokens = http.get("/tokens", params={"tenant": "ml"}).json()["tokens"]
        assert [t["id"] for t in tokens] == [minted.id] and minted not in json.dumps(tokens)
        assert http.delete(f"/tokens/{minted.id}").status_code == 200
        assert http.delete(f"/tokens/{minted.id}").status_code == 404
        refused = http.get("/executions", headers={"Authorization": f"Bearer {minted}"})
        assert refused.status_code == 401


def test_an_expired_token_is_refused_as_expired(cluster: Cluster) -> None:
    cluster.client.tenants.create("ml")
    token = cluster.client.tenants.create_token("ml", role="read", expires_in="1s")
    assert token.expires_at is not None
    bad = cluster.flux("token", "create", "--tenant", "ml", "--expires-in", "soon")
    assert bad.returncode == 2 and "--expires-in must be a duration such as" in bad.stderr
    with _client(cluster, token) as reader:

        def refused() -> str:
            try:
                reader.list_executions()
            except Unauthenticated as exc:
                return str(exc)
            return ""

        # Checked against the clock on every use: refused once its second is past.
        assert "token expired at" in eventually(refused, timeout=5, interval=0.1, what="the expiry")


def test_a_tenant_admin_manages_only_its_own_tenants_tokens_and_audit(cluster: Cluster) -> None:
    admin = cluster.client
    admin.tenants.apply([{"name": "ml"}, {"name": "web"}])
    ml_admin = admin.tenants.create_token("ml", role="admin", name="ml-admin")
    web_token = admin.tenants.create_token("web", role="submit")
    with _client(cluster, ml_admin) as as_ml:
        ml_submit = as_ml.tenants.create_token("ml", role="submit")
        assert {t.id for t in as_ml.tenants.list_tokens()} == {ml_admin.id, ml_submit.id}
        with pytest.raises(NotFound, match="tenant 'web' does not exist"):
            as_ml.tenants.list_tokens("web")
        # Another tenant's token answers exactly as a missing one.
        with pytest.raises(NotFound) as foreign:
            as_ml.tenants.revoke_token(web_token.id)
        with pytest.raises(NotFound) as missing:
            as_ml.tenants.revoke_token("0123456789ab")
        assert str(foreign.value).replace(web_token.id, "ID") == str(missing.value).replace(
            "0123456789ab", "ID"
        )
        with pytest.raises(PermissionDenied, match="cannot mint a cluster-admin token"):
            as_ml.tenants.create_token("ml", role="cluster-admin")
        as_ml.tenants.revoke_token(ml_submit.id)
        mine = as_ml.tenants.audit()
        assert mine and {e.tenant for e in mine} == {"ml"}
        assert [e.action for e in mine[:2]] == ["token.revoke", "token.create"]
        assert (mine[0].token_id, mine[0].caller_tenant, mine[0].caller_role) == (ml_admin.id, "ml", "admin")
    everything = admin.tenants.audit()
    assert {"ml", "web"} <= {e.tenant for e in everything}
    assert web_token not in json.dumps([e.details_json for e in everything])
    with _client(cluster, web_token) as as_web:
        assert as_web.list_executions().executions == []  # never revoked by ml's admin


def test_a_tenant_created_again_under_an_old_name_sees_none_of_the_old_ones_work(cluster: Cluster) -> None:
    admin = cluster.client
    admin.tenants.create("ml")
    with _client(cluster, admin.tenants.create_token("ml")) as old_ml:
        old = old_ml.run("echo", "old ml's")  # no worker: it waits
    refused = cluster.flux("tenant", "delete", "ml")
    assert refused.returncode != 0 and "tenant 'ml' has 1 unfinished execution" in refused.stderr
    admin.cancel(old.execution_id)
    _ok(cluster.flux("tenant", "delete", "ml"))
    admin.tenants.create("ml")
    with _client(cluster, admin.tenants.create_token("ml", role="read")) as new_ml:
        assert new_ml.list_executions().executions == []
        with pytest.raises(NotFound):
            new_ml.get(old.execution_id)
    # A cluster admin still sees it, under the old tenant's tombstone.
    kept = admin.get(old.execution_id)
    assert kept.tenant.startswith("ml~") and kept.tenant != "ml"
    [deleted] = [e for e in admin.tenants.audit() if e.action == "tenant.delete"]
    assert json.loads(deleted.details_json) == {"records_now_under": kept.tenant}


def test_each_administrative_change_is_audited_once_and_kept_across_a_restart(
    cluster: Cluster, tmp_path: Path
) -> None:
    admin = cluster.client
    started = time.time()
    admin.tenants.create("ml", gpu=2)
    admin.tenants.set("ml", gpu=4)
    admin.tenants.apply([{"name": "web"}])
    token = admin.tenants.create_token("ml", role="read", name="ci")
    admin.tenants.revoke_token(token.id)
    cluster.register(WORKFLOWS)
    pools = tmp_path / "pools.yaml"
    pools.write_text(json.dumps({"pools": [{"name": "cpu", "resources": {"cpu": 4}}]}))
    _ok(cluster.flux("pool", "apply", str(pools)))
    cluster.start_worker("w1")
    eventually(lambda: any(w.name == "w1" for w in admin.workers().workers), what="worker w1")
    _ok(cluster.flux("worker", "pause", "w1"))
    _ok(cluster.flux("worker", "resume", "w1"))
    admin.tenants.delete("web")

    expected = [
        ("tenant.create", "ml", "ml"), ("tenant.set", "ml", "ml"), ("tenant.apply", "web", "web"),
        ("token.create", token.id, "ml"), ("token.revoke", token.id, "ml"),
        ("workflow.register", None, "default"), ("pool.apply", "cpu", ""), ("worker.pause", "w1", ""),
        ("worker.resume", "w1", ""), ("tenant.delete", "web", "web"),
    ]  # fmt: skip

    def check(everything: list) -> None:  # type: ignore[type-arg]
        entries = [e for e in everything if e.at >= started]  # the fixture registered workflows before
        got = [(e.action, e.target, e.tenant) for e in reversed(entries)]
        assert [(a, t) for a, _, t in got] == [(a, t) for a, _, t in expected]
        assert all(target == want for (_, target, _), (_, want, _) in zip(got, expected, strict=True) if want)
        # Who: the server's own token (no id), a cluster admin of tenant default.
        assert {(e.token_id, e.caller_tenant, e.caller_role) for e in entries} == {
            ("", "default", "cluster-admin")
        }
        created = json.loads(entries[-4].details_json)
        assert (
            created == {"role": "read", "name": "ci", "expires_at": None}
            and token not in entries[-4].details_json
        )

    check(admin.tenants.audit())
    listed = json.loads(_ok(cluster.flux("audit", "list", "--since", "1h", "--json")))["entries"]
    assert [e["action"] for e in listed][0] == "tenant.delete"
    assert "tenant.create" in _ok(cluster.flux("audit", "list"))

    assert cluster.server is not None
    cluster.server.terminate()
    cluster.server.wait(timeout=30)
    cluster.restart_server()
    with cluster.client_for(cluster.address) as after:
        eventually(lambda: after.tenants.audit(), what="the server back")
        check(after.tenants.audit())
