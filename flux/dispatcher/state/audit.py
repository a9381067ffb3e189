"""The audit trail: every administrative change, who made it, what it was, and when.

Who is the caller's token id (``""`` for the server's own token), tenant and role; what is an
action (``tenant.create``, ``token.revoke``, ``workflow.register``, ``pool.apply``,
``worker.pause``, …), its target and a small JSON object of details, never a secret. Each
entry is stored (kept across restarts, shared by replicas; the store bounds the table:
flux.store.base.AUDIT_DAYS and AUDIT_KEPT) and logged as one structured ``audit`` line.

A tenant admin sees the entries about its own tenant; a cluster admin every entry, the
cluster's own (pools, workers: tenant ``""``) included.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from flux.dispatcher.state.tenants import Caller
from flux.errors import InvalidArgument
from flux.observe import logs
from flux.store import AuditRecord, Store

log = logging.getLogger("flux.audit")
# A listing's default and largest size.
LISTED = 1000


class AuditTrail:
    def __init__(self, store: Store, clock: Callable[[], float] = time.time):
        self.store = store
        self.clock = clock

    async def record(
        self, caller: Caller, action: str, target: str, tenant: str = "", **details: Any
    ) -> AuditRecord:
        """Store and log one change. ``details`` must hold no secret (it is shown to admins)."""
        entry = AuditRecord(
            at=self.clock(), token_id=caller.token_id, caller_tenant=caller.tenant, caller_role=caller.role,
            action=action, target=target, tenant=tenant,
            details_json=json.dumps(details, sort_keys=True, default=str),
        )  # fmt: skip
        await self.store.save_audit(entry)
        if log.isEnabledFor(logging.INFO):
            fields = {
                "action": action, "target": target, "tenant": tenant, "token_id": caller.token_id,
                "caller_tenant": caller.tenant, "caller_role": caller.role, "details": entry.details_json,
            }  # fmt: skip
            logs.event(log, "audit", f"{action} {target}", fields)
        return entry

    async def list(self, caller: Caller, since: float = 0.0, limit: int = 0) -> list[AuditRecord]:
        """Newest first; a tenant admin's only about its own tenant."""
        if limit < 0 or limit > LISTED:
            raise InvalidArgument(f"limit must be between 0 and {LISTED} (0 means {LISTED}); got {limit}")
        if since < 0:
            raise InvalidArgument(f"since must be seconds since the epoch, >= 0 (0: no bound); got {since}")
        return await self.store.list_audit(since, caller.scope, limit or LISTED)
