"""What the gateway serves to a browser, and what it refuses a page on another site.

- ``dashboard``: ``GET /ui``, static files shipped in the package (``ui/``), no build step.
- ``docs``: ``/docs`` and ``/redoc`` from shipped assets, and the OpenAPI security schemes.
- ``browsers``: Host names answered, framing refused, cross-site requests refused.
- ``cors``: CORS for the origins named with ``--cors-origin`` only.
"""

import gateway.browser.cors as cors
import gateway.browser.dashboard as dashboard
import gateway.browser.docs as docs
from gateway.browser.browsers import CrossSiteCheck, HostCheck, NoFraming, allowed_hosts
from gateway.browser.cors import origin

__all__ = ["CrossSiteCheck", "HostCheck", "NoFraming", "allowed_hosts", "cors", "dashboard", "docs", "origin"]
