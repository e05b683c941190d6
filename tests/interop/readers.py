"""The readers of the interop table (its columns), each a function of a :class:`Target`.

A reader opens ``target.store`` (a local directory, or an ``http(s)://`` URL
of a store's root) the way its own users would, reads every value of
``target.path`` and returns them as a numpy array; it raises whatever the
library raises (the harness records the first line) and
:class:`~interop.outcomes.NotApplicableError` for a location it has no store for.

Readers:

- ``zarr-python``: ``zarr.open_array`` with zarr's default codec pipeline.
  The baseline: every array this package writes must read exactly here,
  so its failure fails the test (``required=True``).
- ``zarr-python (fused)``: the same with zarr's ``FusedCodecPipeline``.
- ``zarrs``: zarr-python with ``zarrs.ZarrsCodecPipeline`` (Rust). Opened
  with ``codec_pipeline.strict``, so an array zarrs cannot decode fails
  instead of falling back to zarr's own pipeline (which, without ``strict``,
  only warns and would credit zarr's result to zarrs).
- ``tensorstore``: the ``zarr3`` driver over the ``file`` (or ``http``)
  kvstore.
- ``zarrita``: zarrita.js under node (``tests/js/read_zarr.mjs``), over
  ``@zarrita/storage``'s ``FileSystemStore`` (or zarrita's ``FetchStore``).
  Needs ``npm ci --prefix tests/js`` (``.ci/run`` does it); without node or
  the installed packages its tests skip and say so.

To add a reader: write ``read(target) -> numpy array``, ``version() -> str``
and ``unavailable() -> reason | None``, and call :func:`register_reader`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["JS_DIR", "READERS", "Reader", "Target", "register_reader"]

JS_DIR = Path(__file__).resolve().parent.parent / "js"
_NODE_TIMEOUT = 300


@dataclass(frozen=True, slots=True)
class Target:
    """One array to read, and the values it must read as."""

    store: str
    """The store's root: a local directory, or an ``http://``/``https://`` URL."""
    path: str
    """The array's path inside the store (``RNA/counts``)."""
    expected: npt.NDArray[Any]
    """The values written, as numpy holds them."""
    note: str = ""
    """What the array is (data type, geometry, encoding), for the report."""
    scrub: tuple[str, ...] = ()
    """Strings (temporary paths, ports) that error messages must not carry into the report."""

    @property
    def is_url(self) -> bool:
        """Whether :attr:`store` is an HTTP location rather than a local directory."""
        return self.store.startswith(("http://", "https://"))


@dataclass(frozen=True, slots=True)
class Reader:
    """A column of the table."""

    name: str
    """Column heading, also the JSON file's suffix."""
    read: Callable[[Target], npt.NDArray[Any]]
    """Every value of the target, or an exception."""
    version: Callable[[], str]
    """What was run: library (and runtime) versions."""
    unavailable: Callable[[], str | None] = lambda: None
    """Why this reader cannot run on this machine (its tests skip), or ``None``."""
    required: bool = False
    """A failure of this reader fails the test (the baseline), not only ``differs``."""


READERS: dict[str, Reader] = {}


def register_reader(reader: Reader) -> Reader:
    """Add a column; names are unique."""
    if reader.name in READERS:
        raise ValueError(f"reader {reader.name!r} is already registered")
    READERS[reader.name] = reader
    return reader


# ------------------------------------------------------------------ zarr-python


def _zarr_store(target: Target) -> Any:
    import zarr.storage

    if target.is_url:
        return zarr.storage.FsspecStore.from_url(target.store, read_only=True)
    return zarr.storage.LocalStore(target.store, read_only=True)


def _read_zarr_python(target: Target) -> npt.NDArray[Any]:
    import zarr

    array = zarr.open_array(_zarr_store(target), path=target.path, mode="r")
    return np.asarray(array[...])


def _zarr_version() -> str:
    import numcodecs
    import zarr

    # numcodecs decodes zstd for zarr-python: row-framed chunks need >= 0.16.4
    return f"zarr {zarr.__version__} (numcodecs {numcodecs.__version__})"


register_reader(Reader("zarr-python", _read_zarr_python, _zarr_version, required=True))

_FUSED = "zarr.core.codec_pipeline.FusedCodecPipeline"


def _read_zarr_fused(target: Target) -> npt.NDArray[Any]:
    import zarr

    with zarr.config.set({"codec_pipeline.path": _FUSED}):
        array = zarr.open_array(_zarr_store(target), path=target.path, mode="r")
        pipeline = type(array._async_array.codec_pipeline).__name__
        if pipeline != "FusedCodecPipeline":
            raise RuntimeError(f"zarr opened the array with {pipeline}, not FusedCodecPipeline")
        return np.asarray(array[...])


def _fused_unavailable() -> str | None:
    try:
        from zarr.core.codec_pipeline import FusedCodecPipeline  # noqa: F401
    except ImportError as exc:
        return f"this zarr has no FusedCodecPipeline ({exc})"
    return None


register_reader(
    Reader(
        "zarr-python (fused)",
        _read_zarr_fused,
        lambda: f"{_zarr_version()}, FusedCodecPipeline",
        _fused_unavailable,
    )
)


# ------------------------------------------------------------------ zarrs


def _read_zarrs(target: Target) -> npt.NDArray[Any]:
    import zarr

    config = {"codec_pipeline.path": "zarrs.ZarrsCodecPipeline", "codec_pipeline.strict": True}
    with zarr.config.set(config):
        array = zarr.open_array(_zarr_store(target), path=target.path, mode="r")
        pipeline = type(array._async_array.codec_pipeline).__name__
        if pipeline != "ZarrsCodecPipeline":
            # never credit zarr-python's own pipeline with a zarrs result
            raise RuntimeError(f"zarr opened the array with {pipeline}, not ZarrsCodecPipeline")
        return np.asarray(array[...])


def _zarrs_unavailable() -> str | None:
    try:
        import zarrs  # noqa: F401
    except ImportError as exc:
        return f"zarrs is not installed ({exc}); uv sync installs it with the dev group"
    return None


register_reader(
    Reader(
        "zarrs",
        _read_zarrs,
        lambda: f"zarrs-python {package_version('zarrs')} (ZarrsCodecPipeline, strict)",
        _zarrs_unavailable,
    )
)


# ------------------------------------------------------------------ tensorstore


def _read_tensorstore(target: Target) -> npt.NDArray[Any]:
    import tensorstore as ts

    if target.is_url:
        kvstore = {"driver": "http", "base_url": target.store, "path": target.path + "/"}
    else:
        kvstore = {"driver": "file", "path": str(Path(target.store) / target.path) + "/"}
    store = ts.open({"driver": "zarr3", "kvstore": kvstore}, open=True, read=True).result()
    return np.asarray(store.read().result())


def _tensorstore_unavailable() -> str | None:
    try:
        import tensorstore  # noqa: F401
    except ImportError as exc:
        return f"tensorstore is not installed ({exc}); uv sync installs it with the dev group"
    return None


register_reader(
    Reader(
        "tensorstore",
        _read_tensorstore,
        lambda: f"tensorstore {package_version('tensorstore')}",
        _tensorstore_unavailable,
    )
)


# ------------------------------------------------------------------ zarrita (node)

#: zarrita's data type names -> numpy, for the raw little-endian values the script writes
_ZARRITA_DTYPES = {
    name: np.dtype(name).newbyteorder("<")
    for name in (
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
} | {"bool": np.dtype(bool)}


class ReaderError(RuntimeError):
    """A reader in another process failed; the message is its error's first line."""


def _read_zarrita(target: Target) -> npt.NDArray[Any]:
    node = shutil.which("node")
    if node is None:  # unavailable() skips first; this guards a direct call
        raise ReaderError("node is not installed")
    with tempfile.TemporaryDirectory(prefix="cytearc-zarrita-") as scratch:
        values_file = Path(scratch) / "values"
        done = subprocess.run(
            [node, str(JS_DIR / "read_zarr.mjs"), target.store, target.path, str(values_file)],
            capture_output=True,
            text=True,
            timeout=_NODE_TIMEOUT,
            check=False,
        )
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines() or [f"node exited with {done.returncode}"]
            raise ReaderError(lines[0])
        meta = json.loads(done.stdout)
        shape = tuple(int(n) for n in meta["shape"])
        if meta["values"] == "json":
            strings = json.loads(values_file.read_text(encoding="utf-8"))
            return np.array(strings, dtype=str).reshape(shape)
        dtype = _ZARRITA_DTYPES.get(meta["data_type"])
        if dtype is None:
            raise ReaderError(f"zarrita returned data type {meta['data_type']!r}, unknown here")
        flat = np.fromfile(values_file, dtype=dtype)
        # zarrita lays out an array with a transpose codec in that codec's order: read
        # each value where its stride (in elements) puts it, not in C order
        stride = tuple(int(n) * dtype.itemsize for n in meta.get("stride", ()))
        if len(stride) != len(shape):
            return flat.reshape(shape)
        return np.lib.stride_tricks.as_strided(flat, shape, stride, writeable=False).copy()


def _zarrita_unavailable() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed (the zarrita column needs node >= 18)"
    if not (JS_DIR / "node_modules" / "zarrita" / "package.json").is_file():
        return f"zarrita is not installed: run `npm ci --prefix {JS_DIR}` (.ci/run does)"
    return None


def _zarrita_version() -> str:
    meta = json.loads((JS_DIR / "node_modules" / "zarrita" / "package.json").read_text())
    node = subprocess.run(
        ["node", "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return f"zarrita {meta['version']} (node {node})"


register_reader(Reader("zarrita", _read_zarrita, _zarrita_version, _zarrita_unavailable))
