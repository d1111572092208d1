"""Helpers shared by the collective algorithms: chunk views and block layout."""

from __future__ import annotations

import numpy as np

from ..framing import block_counts, block_offsets, chunk_counts


def chunk_views(u8: np.ndarray, offset_elems: int, count: int, chunk_elems: int, itemsize: int):
    """uint8 views of ``count`` elements starting at element ``offset_elems``, cut into chunks;
    returns ``(views, elems)``."""
    elems = chunk_counts(count, chunk_elems)
    views, pos = [], offset_elems * itemsize
    for e in elems:
        views.append(u8[pos:pos + e * itemsize])
        pos += e * itemsize
    return views, elems


class Blocks:
    """Balanced block partition of ``count`` elements over ``size`` ranks."""

    def __init__(self, count: int, size: int):
        self.counts = block_counts(count, size)
        self.offsets = block_offsets(self.counts)
        self.max = max(self.counts) if self.counts else 0

    def views(self, u8, b, chunk_elems, itemsize):
        return chunk_views(u8, self.offsets[b], self.counts[b], chunk_elems, itemsize)

    def typed(self, arr, b):
        o = self.offsets[b]
        return arr[o:o + self.counts[b]]
