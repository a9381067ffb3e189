"""TenantDirectory's tokens over an in-memory store, with clocks the test moves."""

from __future__ import annotations

import pytest

from flux.dispatcher.state.tenants import REMEMBERED_FOR, TOUCH_EVERY, Caller, TenantDirectory
from flux.domain.tenant import Tenant
from flux.errors import FailedPrecondition, InvalidArgument, NotFound
from tests.unit.memory_store import MemoryStore


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_a_token_is_remembered_under_a_second_expires_by_the_clock_and_is_touched_once_a_minute() -> (
    None
):
    assert REMEMBERED_FOR <= 1.0  # a revocation elsewhere holds within a second
    store, monotonic, wall = MemoryStore(), Clock(), Clock(1_700_000_000.0)
    directory = TenantDirectory(store, clock=monotonic, wall=wall)
    await directory.create(Tenant("ml"))
    token, record = await directory.create_token("ml", "read", name="ci", expires_in=3600)
    assert await directory.caller(token) == Caller("ml", "read", record.id)
    assert store.tokens[record.digest].last_used_at == wall.now
    first_use = wall.now
    wall.now += TOUCH_EVERY / 2
    monotonic.now += 10
    await directory.caller(token)
    assert store.tokens[record.digest].last_used_at == first_use  # not written again within the minute
    wall.now = first_use + TOUCH_EVERY
    monotonic.now += 10
    await directory.caller(token)
    assert store.tokens[record.digest].last_used_at == wall.now

    # Revoked in the store by another replica: refused once the memory of it lapses.
    await store.revoke_token(record.id)
    monotonic.now += REMEMBERED_FOR
    assert "revoked" in str(await directory.lookup(token))
    other, _ = await directory.create_token("ml", "submit", expires_in=60)
    assert await directory.caller(other) is not None
    wall.now += 60  # expiry needs no store read: the remembered record is checked against the clock
    assert str(await directory.lookup(other)).startswith("token expired at")


async def test_tokens_are_refused_naming_the_field_and_revoked_only_within_a_tenant() -> None:
    directory = TenantDirectory(MemoryStore())
    await directory.create(Tenant("ml"))
    await directory.create(Tenant("web"))
    with pytest.raises(InvalidArgument, match="expires_in"):
        await directory.create_token("ml", "read", expires_in=-5)
    with pytest.raises(InvalidArgument, match="token name"):
        await directory.create_token("ml", "read", name="a\nb")
    token, record = await directory.create_token("web", "read")
    with pytest.raises(NotFound, match="does not exist"):
        await directory.revoke_token(record.id, "ml")
    assert [t.id for t in await directory.list_tokens("web")] == [record.id]
    await directory.revoke_token(record.id, "web")
    assert await directory.caller(token) is None and await directory.list_tokens() == []


async def test_a_tenant_with_unfinished_work_is_not_deleted() -> None:
    async def unfinished(tenant: str) -> int:
        return 2 if tenant == "ml" else 0

    directory = TenantDirectory(MemoryStore(), unfinished=unfinished)
    await directory.create(Tenant("ml"))
    with pytest.raises(FailedPrecondition, match="tenant 'ml' has 2 unfinished executions"):
        await directory.delete("ml")
