"""The scheduling cycle: when a pass runs (``passes``); the pass itself is ``Dispatcher.place``:
views → the pure ``flux.matching.schedule`` → reserve → the mode's bind."""

__all__ = ["passes"]
