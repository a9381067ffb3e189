"""Where one server and replicas differ, injected as three strategies (their protocols are in
``flux.dispatcher.handle``): ``local`` for one server, ``shared`` for replicas on PostgreSQL.
A mode reads the ``Handle`` it is given; neither imports the other."""

__all__ = ["local", "shared"]
