"""Copy a GGUF model with `<arch>.pooling_type` set, as an embedding model's GGUF names it.

Usage: python tests/pooled_model.py IN.gguf OUT.gguf POOLING
POOLING is llama.cpp's number: 1 mean, 2 cls, 3 last, 4 rank. Uses the `gguf` package
(llama.cpp's own gguf-py, from PyPI) to rewrite the header; the tensors are copied as they are.
"""
import sys

import gguf
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata


def main() -> None:
    src, dst, pooling = sys.argv[1], sys.argv[2], int(sys.argv[3])
    reader = gguf.GGUFReader(src, "r")
    arch_field = reader.get_field(gguf.Keys.General.ARCHITECTURE)
    arch = arch_field.contents()
    writer = gguf.GGUFWriter(dst, arch=arch, endianess=reader.endianess)
    new = {f"{arch}.pooling_type": MetadataDetails(gguf.GGUFValueType.UINT32, pooling)}
    copy_with_new_metadata(reader, writer, new, [])
    print(f"wrote {dst} with {arch}.pooling_type = {pooling}")


if __name__ == "__main__":
    main()
