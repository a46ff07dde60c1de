from .tupe_roberta import TupeRobertaModel, VariantMismatchError  # noqa: F401
from . import architectures  # noqa: F401  (registers every --arch)
