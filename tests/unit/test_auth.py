import secrets
import stat
from pathlib import Path

import grpc
import pytest

from flux.security import Role, Tokens, bearer, caller_token, check, new_token, server_token

TOKENS = Tokens(worker="w-secret", api="a-secret")


def test_server_generates_once_with_owner_only_permissions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLUX_WORKER_TOKEN", raising=False)
    token, generated = server_token(Role.WORKER, None, None, tmp_path)
    assert generated and len(token) >= 40
    path = tmp_path / "worker.token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again, generated_again = server_token(Role.WORKER, None, None, tmp_path)
    assert (again, generated_again) == (token, False)
    assert caller_token(Role.WORKER, state_dir=tmp_path) == token


@pytest.mark.parametrize(
    ("flag", "file", "env", "expected"),
    [
        pytest.param("from-flag", "f", "from-env", "from-flag", id="flag wins"),
        pytest.param(None, "f", "from-env", "from-file", id="file before environment"),
        pytest.param(None, None, "from-env", "from-env", id="environment before ./.flux"),
        pytest.param(None, None, None, "stored", id="./.flux last"),
    ],
)
def test_token_sources_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag, file, env, expected
) -> None:
    (tmp_path / "f").write_text("from-file\n")
    (tmp_path / "api.token").write_text("stored\n")
    monkeypatch.delenv("FLUX_API_TOKEN_FILE", raising=False)
    if env:
        monkeypatch.setenv("FLUX_API_TOKEN", env)
    else:
        monkeypatch.delenv("FLUX_API_TOKEN", raising=False)
    path = str(tmp_path / file) if file else None
    assert caller_token(Role.CLIENT, flag, path, tmp_path) == expected
    assert server_token(Role.CLIENT, flag, path, tmp_path) == (expected, False)


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.value)
def test_the_token_file_variable_comes_after_the_token_variable_and_before_dot_flux(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, role: Role
) -> None:
    """FLUX_<ROLE>_TOKEN_FILE: a mounted Secret found by `flux` run in a pod (`kubectl exec`) with no flag."""
    (tmp_path / "secret").write_text("from-named-file\n")
    (tmp_path / role.filename).write_text("stored\n")
    monkeypatch.delenv(role.env, raising=False)
    monkeypatch.setenv(role.file_env, str(tmp_path / "secret"))
    assert role.file_env == f"FLUX_{role.value.upper()}_TOKEN_FILE"
    assert caller_token(role, state_dir=tmp_path) == "from-named-file"
    assert server_token(role, None, None, tmp_path) == ("from-named-file", False)
    monkeypatch.setenv(role.env, "from-env")
    assert caller_token(role, state_dir=tmp_path) == "from-env"
    monkeypatch.delenv(role.env)
    monkeypatch.setenv(role.file_env, str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=rf"{role.file_env}: cannot read token file"):
        caller_token(role, state_dir=tmp_path)


def test_empty_token_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        caller_token(Role.CLIENT, None, str(tmp_path / "empty"))


@pytest.mark.parametrize(
    ("method", "token", "expected"),
    [
        pytest.param(
            "/flux.v1.WorkerService/Register", "w-secret", None, id="worker token on worker service"
        ),
        pytest.param(
            "/flux.v1.ControlService/RunWorkflow", "a-secret", None, id="api token on control service"
        ),
        pytest.param("/flux.v1.WorkerService/Connect", "", grpc.StatusCode.UNAUTHENTICATED, id="no token"),
        pytest.param(
            "/flux.v1.ControlService/GetExecution", "nope", grpc.StatusCode.UNAUTHENTICATED, id="wrong"
        ),
        pytest.param(
            "/flux.v1.WorkerService/Claim",
            "a-secret",
            grpc.StatusCode.PERMISSION_DENIED,
            id="client token as worker",
        ),
        pytest.param(
            "/flux.v1.ControlService/RunWorkflow",
            "w-secret",
            grpc.StatusCode.PERMISSION_DENIED,
            id="worker as client",
        ),
        pytest.param("/grpc.health.v1.Health/Check", "", None, id="health is open"),
    ],
)
def test_check(method: str, token: str, expected: grpc.StatusCode | None) -> None:
    refusal = check(TOKENS, method, token)
    assert (refusal[0] if refusal else None) == expected
    if refusal:
        assert "secret" not in refusal[1]


def test_bearer_parsing() -> None:
    assert bearer((("authorization", "Bearer abc"),)) == "abc"
    assert bearer((("authorization", "Basic abc"),)) == ""
    assert bearer(None) == ""


def test_the_state_directory_and_database_are_owner_only(tmp_path: Path) -> None:
    import asyncio

    from flux.store.sqlite import SqliteStore

    server_token(Role.WORKER, None, None, tmp_path / "state")
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    store = SqliteStore(tmp_path / "db" / "flux.db")

    async def open_and_close() -> None:
        await store.open()
        await store.close()

    asyncio.run(open_and_close())
    assert stat.S_IMODE((tmp_path / "db" / "flux.db").stat().st_mode) == 0o600


def test_a_generated_token_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # Even when the random part does (1 in 64 did before): "--worker-token -x…" reads as a flag.
    monkeypatch.setattr(secrets, "token_urlsafe", lambda n: "-" * 43)
    assert not new_token().startswith("-")
    monkeypatch.undo()
    tokens = [new_token() for _ in range(2000)]
    assert not any(t.startswith("-") for t in tokens)
    assert len(set(tokens)) == len(tokens) and all(len(t) >= 44 for t in tokens)
