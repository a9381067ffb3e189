"""What the dispatcher holds: executions (``table``, ``unfinished``, ``watchers``), workflows
(``catalogue``), workers (``registry``, ``worker_entry``, ``session``, ``pings``), dispatches
waiting for their claim (``deadlines``), tenants' usage and terms (``quotas``, ``tenants``),
pools (``pools``), what it tells the world (``lifecycle``, ``traces``), and the checks every
input passes first (``validation``). No module here changes another's state on its own."""

__all__ = [
    "catalogue",
    "dependencies",
    "deadlines",
    "freezing",
    "lifecycle",
    "pings",
    "pools",
    "quotas",
    "registry",
    "session",
    "settings",
    "table",
    "tenants",
    "traces",
    "unfinished",
    "validation",
    "watchers",
    "worker_entry",
]
