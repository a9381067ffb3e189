"""The worker side: probing what this machine offers (``probe``, ``gpu``)."""
