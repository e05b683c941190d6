"""Listing the pinned data sets and their cache state."""

from __future__ import annotations

from .cache import PathLike, _quiet_verified, _target, data_dir
from .specs import SPECS

__all__ = ["available", "describe"]


def available(*, cached_only: bool = False, cache_dir: PathLike | None = None) -> list[str]:
    """Names of the pinned data sets.

    Parameters
    ----------
    cached_only
        Only those already in the cache and intact (usable without a download).
    cache_dir
        Cache root; see :func:`data_dir`.

    Returns
    -------
    list of str
        Data set names in registry order.
    """
    if not cached_only:
        return list(SPECS)
    root = data_dir(cache_dir)
    return [name for name, spec in SPECS.items() if _quiet_verified(spec, root)]


def describe(*, cache_dir: PathLike | None = None) -> str:
    """A human-readable listing of every data set, its pin, licence and cache state.

    Parameters
    ----------
    cache_dir
        Cache root; see :func:`data_dir`.

    Returns
    -------
    str
        Several lines per data set.
    """
    root = data_dir(cache_dir)
    cached = set(available(cached_only=True, cache_dir=root))
    lines = [f"cache: {root}"]
    for name, spec in SPECS.items():
        cells, genes = spec.shape
        state = f"cached at {_target(spec, root)}" if name in cached else "not cached"
        lines += [
            f"{name}: {cells:,} x {genes:,}  {spec.title}",
            f"    {spec.requirement} ({spec.kind}) {spec.member}",
            f"    sha256 {spec.sha256}",
            f"    licence {spec.license}; {spec.citation}",
            f"    {state}",
        ]
    return "\n".join(lines)
