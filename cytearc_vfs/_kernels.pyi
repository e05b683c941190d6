from collections.abc import Buffer

def gather_columns(
    src: Buffer, src_cols: int, itemsize: int, index: Buffer, out: Buffer, /
) -> None: ...
def read_row_frames(
    fd: int,
    chunk_rows: int,
    offsets: Buffer,
    sizes: Buffer,
    counts: Buffer,
    rows: Buffer,
    out: Buffer,
    /,
) -> tuple[int, int] | None: ...
