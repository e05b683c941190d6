"""Options shared by the commands that keep a store open and answer reads (``serve``, ``mount-fs``).

Kept free of heavy imports, as the parser is.
"""

from __future__ import annotations

import argparse

__all__ = ["add_anndata_view_options", "add_reopen_pause_option"]


def add_reopen_pause_option(parser: argparse.ArgumentParser) -> None:
    """``--reopen-pause SECONDS``."""
    parser.add_argument(
        "--reopen-pause",
        metavar="SECONDS",
        default=None,
        help=(
            "after a composite or mount was reopened because a read found a source gone or "
            "changed, wait this long before reopening again unless a local source's directory "
            "or root zarr.json changes (default 60; how a remote source's return is noticed)"
        ),
    )


def add_anndata_view_options(parser: argparse.ArgumentParser) -> None:
    """``--as-anndata`` and the ``--assay`` it presents."""
    parser.add_argument(
        "--as-anndata",
        action="store_true",
        help=(
            "present the store as an AnnData Zarr store (the layout of cv.anndata_view: X is "
            "the assay's counts, obs and var its tables; nothing copied), which "
            "anndata.read_zarr and anndata.experimental.read_lazy open"
        ),
    )
    parser.add_argument(
        "--assay",
        default=None,
        help="with --as-anndata: the assay whose counts become X (default RNA)",
    )
