"""The torch-free core: the vocabulary of cells (variants, precisions, model specs), the result record and its
validation, the clocks, the stages, statistics."""
