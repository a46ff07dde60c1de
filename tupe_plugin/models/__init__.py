from ..positional.record import PositionalVariant  # noqa: F401
from ..positional.registry import VARIANTS  # noqa: F401
from .tupe_roberta import TupeRobertaModel, VariantMismatchError  # noqa: F401
from . import architectures  # noqa: F401  (registers every --arch)
