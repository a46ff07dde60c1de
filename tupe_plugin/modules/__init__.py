from .attention import BiasedSelfAttention, SelfAttention  # noqa: F401
from .masks import attention_mask  # noqa: F401
from .encoder import TupeEncoderLayer, TupeTransformerEncoder  # noqa: F401
from .positional_term import PositionalTerm, TupePositions, relative_position_bucket  # noqa: F401
