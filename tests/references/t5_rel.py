"""T5's bucketed bias alone (Raffel et al. 2020): ``b_h[bucket(j - i)]``, no [CLS] buckets."""
from functools import partial

from references._shared import content_plus, t5_bias, t5_bias_obvious
from tupe_core.base import BIAS

ENTERS, INPUT, SCALE = BIAS, None, 1
BEYOND = None  # the buckets saturate at 128
ARCH_ONLY = False

positional = partial(t5_bias, cls_buckets=False)
differentiable = partial(t5_bias_obvious, cls_buckets=False)
layer0_logits = content_plus(SCALE, positional)
position_map = positional
