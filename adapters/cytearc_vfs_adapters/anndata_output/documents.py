"""Zarr v3 documents and chunk bytes of the arrays an AnnData view computes.

Pure functions: the ``zarr.json`` of a 1-D (or 0-d) array with only the
``bytes`` or ``vlen-utf8`` codec, and the bytes of one of its chunks. The
``vlen-utf8`` chunk format (the Zarr v3 ``string`` data type's codec, the
same bytes as numcodecs' ``VLenUTF8``): a little-endian ``uint32`` count of
items, then for each item a ``uint32`` byte length and its UTF-8 bytes.
Chunks are always of the full chunk shape; an edge chunk is padded with the
fill value, as zarr expects.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "ANNDATA_ROOT",
    "array_document",
    "encoded_attributes",
    "group_document",
    "numeric_chunk",
    "text_chunk",
]

#: Attributes of the root group of an AnnData container (spec: anndata 0.1.0).
ANNDATA_ROOT = {"encoding-type": "anndata", "encoding-version": "0.1.0"}


def encoded_attributes(kind: str, version: str, **extra: Any) -> dict[str, Any]:
    """The ``encoding-type`` and ``encoding-version`` attributes, then ``extra``.

    >>> encoded_attributes("array", "0.2.0")
    {'encoding-type': 'array', 'encoding-version': '0.2.0'}
    """
    return {"encoding-type": kind, "encoding-version": version, **extra}


def group_document(attributes: Mapping[str, Any]) -> bytes:
    """A group's ``zarr.json``."""
    return json.dumps(
        {"zarr_format": 3, "node_type": "group", "attributes": dict(attributes)}
    ).encode()


def array_document(
    shape: Sequence[int],
    chunks: Sequence[int],
    dtype: np.dtype | str,
    attributes: Mapping[str, Any],
) -> bytes:
    """An uncompressed array's ``zarr.json``; ``dtype="string"`` is variable-length UTF-8.

    >>> json.loads(array_document([5], [2], "string", {}))["codecs"]
    [{'name': 'vlen-utf8', 'configuration': {}}]
    """
    fill: str | bool | int
    if isinstance(dtype, str) and dtype == "string":
        data_type, fill = "string", ""
        codecs: list[dict[str, Any]] = [{"name": "vlen-utf8", "configuration": {}}]
    else:
        numpy_dtype = np.dtype(dtype)
        data_type = "bool" if numpy_dtype == np.bool_ else numpy_dtype.name
        fill = False if numpy_dtype == np.bool_ else 0
        codecs = [{"name": "bytes", "configuration": {"endian": "little"}}]
        if numpy_dtype.itemsize == 1:
            codecs = [{"name": "bytes", "configuration": {}}]
    return json.dumps(
        {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(shape),
            "data_type": data_type,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill,
            "codecs": codecs,
            "attributes": dict(attributes),
            "storage_transformers": [],
        }
    ).encode()


def text_chunk(values: Iterable[str], chunk_length: int) -> bytes:
    """One ``vlen-utf8`` chunk of ``chunk_length`` items, padded with ``""``.

    >>> text_chunk(["ab"], 2)
    b'\\x02\\x00\\x00\\x00\\x02\\x00\\x00\\x00ab\\x00\\x00\\x00\\x00'
    """
    encoded = [str(value).encode("utf-8") for value in values]
    if len(encoded) > chunk_length:
        raise ValueError(f"{len(encoded)} values do not fit a chunk of {chunk_length}")
    encoded.extend([b""] * (chunk_length - len(encoded)))
    parts = [struct.pack("<I", len(encoded))]
    for item in encoded:
        parts.append(struct.pack("<I", len(item)))
        parts.append(item)
    return b"".join(parts)


def numeric_chunk(values: npt.NDArray[Any], chunk_shape: Sequence[int]) -> bytes:
    """One ``bytes``-codec chunk (little-endian, C order), zero-padded to ``chunk_shape``.

    >>> numeric_chunk(np.array([1, 2], dtype="<i2"), [3])
    b'\\x01\\x00\\x02\\x00\\x00\\x00'
    """
    full = np.zeros(tuple(chunk_shape), dtype=values.dtype.newbyteorder("<"))
    full[tuple(slice(0, n) for n in values.shape)] = values
    return full.tobytes()
