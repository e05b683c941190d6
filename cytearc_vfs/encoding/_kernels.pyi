from collections.abc import Buffer

def gather_columns(
    src: Buffer,
    src_cols: int,
    itemsize: int,
    index: Buffer,
    out: Buffer,
    zero_column: int = -1,
    plan: bytes | None = None,
    /,
) -> None: ...
def plan_gather(
    index: Buffer, src_cols: int, itemsize: int, zero_column: int = -1, /
) -> bytes | None: ...
def scatter_columns(
    src: Buffer,
    src_cols: int,
    itemsize: int,
    cells: Buffer,
    out: Buffer,
    out_cols: int,
    rows: Buffer,
    targets: Buffer,
    /,
) -> None: ...
def read_row_frames(
    fd: int,
    chunk_rows: int,
    offsets: Buffer,
    sizes: Buffer,
    counts: Buffer,
    rows: Buffer,
    out: Buffer,
    rows_per_frame: int = 1,
    block_bytes: int = 0,
    /,
) -> tuple[int, int] | None: ...
def read_ranges(fd: int, offsets: Buffer, sizes: Buffer, out: Buffer, /) -> int: ...
def nonzero_rows(
    block: Buffer,
    width: int,
    itemsize: int,
    is_float: bool,
    out_cols: Buffer,
    row: int,
    at: int,
    indptr: Buffer,
    indices: Buffer,
    data: Buffer,
    /,
) -> tuple[int, int]: ...
def scatter_entries(
    out: Buffer,
    width: int,
    itemsize: int,
    cell_major: bool,
    out_majors: Buffer,
    bounds: Buffer,
    minor: Buffer,
    minor_size: int,
    values: Buffer,
    lookup: Buffer,
    /,
) -> None: ...
