"""Analysis of positional encodings (numpy only at import time; torch tensors are accepted as input)."""
from .locality_symmetry import locality, softmax_rows, symmetry, symmetry_scaled

__all__ = ["locality", "symmetry", "symmetry_scaled", "softmax_rows"]
