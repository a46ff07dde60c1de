"""Let ``torch.load(weights_only=True)`` read fairseq checkpoints, and nothing more.

torch >= 2.6 loads with ``weights_only=True`` by default, which refuses the plain Python objects
fairseq stores (the argparse ``Namespace``, omegaconf configs). Importing this plugin allowlists exactly
those classes (``tupe_common.checkpoint_file.allow_fairseq_objects``, which needs no fairseq) and fairseq's
``_TensorPlaceholder``, found in the loaded state that fairseq re-pickles to broadcast to other ranks
(fairseq/distributed/utils.py: tensors split out of it when resuming with more than one process); any other
global in a pickle (e.g. ``os.system``) is still refused by torch. ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` is
never needed.
"""
from __future__ import annotations

import torch
from fairseq.distributed.utils import _TensorPlaceholder

from tupe_common.checkpoint_file import allow_fairseq_objects

allow_fairseq_objects()
torch.serialization.add_safe_globals([_TensorPlaceholder])
