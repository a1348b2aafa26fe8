"""gguf_read.read(path): llama.cpp's gguf-py GGUFReader over a plain read-only array.

GGUFReader maps the file with numpy.memmap and slices it once per field part: for a 150k-token
vocabulary that is millions of memmap objects, whose bookkeeping (memmap.__array_finalize__) takes
~80 % of the read. The same parser over the same bytes viewed as a plain ndarray gives the same fields
and tensors about five times faster. Only the array's type changes; every byte is still parsed by
gguf-py's own code."""
import numpy as np

import gguf  # llama.cpp's gguf-py (on PYTHONPATH)


def read(path):
    memmap = np.memmap

    def plain(*args, **kwargs):
        return memmap(*args, **kwargs).view(np.ndarray)

    np.memmap = plain
    try:
        return gguf.GGUFReader(path)
    finally:
        np.memmap = memmap
