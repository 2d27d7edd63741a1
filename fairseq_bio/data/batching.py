"""Batching that scores every example: fairseq's ``batch_by_size`` drops a last batch whose size is
not a multiple of ``required_batch_size_multiple`` (8 by default, in fairseq-train and
fairseq-validate alike). With batches built from length-sorted indices that last batch holds the
longest examples, so they would never be trained on or scored.
"""

import numpy as np


class KeepsEveryExample:
    """Mixin for a ``FairseqDataset``: ``batch_by_size`` as fairseq's, plus the examples it dropped
    as a last batch."""

    def batch_by_size(
        self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1
    ):
        batches = list(
            super().batch_by_size(indices, max_tokens, max_sentences, required_batch_size_multiple)
        )
        batched = np.concatenate(batches) if batches else np.zeros(0, dtype=np.int64)
        dropped = np.asarray(indices)[~np.isin(indices, batched)]
        if len(dropped):
            batches.append(dropped.astype(np.int64))
        return batches


class LengthSortedExamples(KeepsEveryExample):
    """Mixin for the fine-tuning datasets: size-ordered batches of every example, reshuffled each
    epoch.

    The dataset sets ``_sizes`` (tokens of each example, all its windows), ``shuffle``, ``seed``,
    ``epoch`` (1) and ``max_tokens`` (the task's; an example never counts as more than a batch, so a
    long one still gets one).
    """

    @property
    def sizes(self):
        return self._sizes

    def num_tokens(self, index):
        size = int(self._sizes[index])
        return min(size, self.max_tokens) if self.max_tokens else size

    def size(self, index):
        return self.num_tokens(index)

    def set_epoch(self, epoch):
        self.epoch = epoch

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return False  # reshuffled every epoch

    def ordered_indices(self):
        """By size (length-sorted batches waste little padding), in a seeded random order within a
        size."""
        if self.shuffle:
            order = np.random.RandomState(self.seed + self.epoch).permutation(len(self))
        else:
            order = np.arange(len(self))
        return order[np.argsort(self._sizes[order], kind="mergesort")]
