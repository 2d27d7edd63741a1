"""Split sentences longer than a block into near-equal pieces, so that no text is dropped or
truncated."""

import numpy as np
from fairseq.data import BaseWrapperDataset


class ChunkedSentenceDataset(BaseWrapperDataset):
    """Each item longer than ``max_len`` becomes ``ceil(len / max_len)`` consecutive pieces of
    near-equal length; shorter items pass through. fairseq's ``complete``/``complete_doc``/``eos``
    block modes keep a sentence longer than the block whole, which then fails the size check (or is
    skipped and lost).
    """

    def __init__(self, dataset, max_len: int):
        super().__init__(dataset)
        if max_len < 2:
            raise ValueError("max_len must be at least 2")
        sizes = np.asarray(dataset.sizes, dtype=np.int64)
        pieces = np.maximum(1, -(-sizes // max_len))
        self.item = np.repeat(np.arange(len(sizes)), pieces)
        first = np.repeat(np.cumsum(pieces) - pieces, pieces)
        k = np.arange(len(self.item)) - first  # piece number within its item
        n = pieces[self.item]
        total = sizes[self.item]
        # Balanced cut points: every piece has at least max_len // 2 tokens, so none can be mistaken
        # for the one-token document separator of complete_doc.
        self.start = k * total // n
        self.end = (k + 1) * total // n
        self._sizes = (self.end - self.start).astype(np.int64)

    @classmethod
    def wrap_if_needed(cls, dataset, max_len: int):
        """``dataset`` itself when no item exceeds ``max_len``."""
        return cls(dataset, max_len) if np.max(dataset.sizes, initial=0) > max_len else dataset

    def __getitem__(self, index):
        return self.dataset[self.item[index]][self.start[index] : self.end[index]]

    def __len__(self):
        return len(self._sizes)

    @property
    def sizes(self):
        return self._sizes

    def num_tokens(self, index):
        return self._sizes[index]

    def size(self, index):
        return self._sizes[index]

    def ordered_indices(self):
        return np.arange(len(self))

    @property
    def supports_prefetch(self):
        return False
