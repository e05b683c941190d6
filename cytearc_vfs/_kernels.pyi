from collections.abc import Buffer

def gather_columns(
    src: Buffer, src_cols: int, itemsize: int, index: Buffer, out: Buffer, /
) -> None: ...
