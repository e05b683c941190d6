"""``artifacts`` and ``export`` of a store on object storage read each document and listing once.

``artifacts`` told what the location holds, then opened the store anew with
``open_store``; ``export`` opened the store, then bound a reader and read
the tables, each reading the store's documents on its own. Against a
loopback S3 server, ``artifacts`` of an ordinary store made 34 requests (its
top-level listing and the root document 4 or 5 times each) and ``export``
60 (``cellData/zarr.json`` 5 times). ``artifacts`` now opens the store
through the view its check read (``viewed_for_reading``, ``opened_store``);
``export`` reads the store through one such view for the whole export.
Counted at a proxy in front of the server, as
``tests/test_command_reads_once.py`` counts.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cli_harness import run_main
from test_command_reads_once import _stores

#: Requests of each command, by kind of store (before this change: artifacts 34,
#: 32, 44; export 60, 48, 52).
EXPECTED = {
    ("ordinary", "artifacts"): 19,
    ("composite", "artifacts"): 24,
    ("mount", "artifacts"): 35,
    ("ordinary", "export"): 33,
    ("composite", "export"): 44,
    ("mount", "export"): 46,
}


def _is_metadata(method: str, path: str) -> bool:
    """A metadata document, a listing, or a request for whether a key exists."""
    return method == "HEAD" or "list-type=" in path or path.endswith("zarr.json")


@pytest.mark.parametrize("command", ["artifacts", "export"])
@pytest.mark.parametrize("kind", ["ordinary", "composite", "mount"])
def test_each_document_and_listing_is_read_once_a_command(
    s3_server: Any, s3_proxy: Any, kind: str, command: str, tmp_path: Path
) -> None:
    url, flags = _stores(s3_server, s3_proxy, kind)
    out = tmp_path / "out.h5ad"
    s3_proxy.take()
    given = [url] if command == "artifacts" else [url, str(out)]
    said = run_main(command, *given, *flags)
    assert said.returncode == 0, said.stderr
    seen = s3_proxy.take()
    requests = Counter((s.method, s.path) for s in seen)
    again = {key: count for key, count in requests.items() if count > 1}
    if kind == "ordinary":
        assert again == {}, again
    else:
        # a composite's and a mount's id chunks are read by the open's checks and by
        # the tables (data, not documents): see docs/remote.md
        assert not {key for key in again if _is_metadata(*key)}, again
    assert len(seen) == EXPECTED[kind, command]
    if command == "artifacts":
        assert said.stdout.startswith(f"{url}: ")
    else:
        assert said.stdout.startswith("exported 40 cells" if kind != "composite" else "exported")
        assert out.is_file()
