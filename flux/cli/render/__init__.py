"""Turn control-plane answers into what a person reads, or one JSON object for scripts.

One module per thing shown: ``executions`` (an execution, a listing, an explanation),
``workflows``, ``workers`` (the fleet table), ``status`` (``flux status``: the fleet,
pending work, tenants and pools); ``common`` holds the units and the table they share.
Renderers are pure: messages (and a clock value) in, text out.
"""
