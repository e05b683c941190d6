"""Reader compatibility of the stores this package writes (issue 14).

Every array kind (a row: ``kinds.KINDS``) is read whole by every reader (a
column: ``readers.READERS``) and compared exactly with the values written
(``outcomes.compare``). A cell is ``exact``, ``differs`` (silent wrong
values: the test fails, loudly) or ``fails: <first line of the error>``
(recorded, not a test failure: these are the findings issue 14 fixes; only
the baseline reader, zarr-python, must read everything). ``n/a`` marks a
reader that cannot address the location at all.

Modules:

- ``readers``: zarr-python, zarr-python + zarrs, tensorstore, zarrita
  (node, ``tests/js``); :func:`readers.register_reader` adds a column.
- ``kinds``: the stores (written once per session by ``kinds.Workspace``)
  and the rows; :func:`kinds.array_kind` adds a row. Its docstring shows
  the few lines a row over ``cytearc-vfs serve`` (HTTP) or
  ``cytearc-vfs mount-fs`` (FUSE) takes: a kind is a context manager, so it
  can start a server or a mount and every reader reads while it runs.
- ``writer_kinds``: the rows of the other writers (counts of every dtype,
  repack, a mount's target, a composite's summaries, the array operations,
  the AnnData export), registered after ``kinds``' own.
- ``outcomes``: classification and the JSON cells.
- ``static_http``: a loopback static file server with byte ranges.
- ``test_interop``: the table as tests (``-k 'tensorstore'`` for a column,
  ``-k 'counts-default'`` for a row).
- ``report``: ``uv run python -m tests.interop.report`` runs the tests with
  ``$CYTEARC_INTEROP_REPORT`` set and writes ``docs/interop.md``.
"""
