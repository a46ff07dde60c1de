"""Let ``torch.load(weights_only=True)`` read fairseq checkpoints, and nothing more.

torch >= 2.6 loads with ``weights_only=True`` by default, which refuses the plain Python objects
fairseq stores (the argparse ``Namespace``, omegaconf configs, logging meters). Importing this
plugin allowlists exactly those classes; any other global in a pickle (e.g. ``os.system``) is
still refused by torch. ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` is never needed.
"""
from __future__ import annotations

import argparse
import collections
import typing

import torch
from fairseq.distributed.utils import _TensorPlaceholder
from omegaconf import DictConfig, ListConfig
from omegaconf.base import ContainerMetadata, Metadata
from omegaconf.nodes import AnyNode

# Measured with torch.serialization.get_unsafe_globals_in_checkpoint on fairseq-train and
# fairseq-hydra-train checkpoints, and on the loaded state that fairseq re-pickles to broadcast
# to other ranks (fairseq/distributed/utils.py), which carries cfg as a DictConfig.
SAFE_GLOBALS = [
    argparse.Namespace,  # cfg["model"] of checkpoints written by fairseq-train
    DictConfig,
    ListConfig,
    ContainerMetadata,
    Metadata,
    AnyNode,
    typing.Any,
    collections.defaultdict,
    dict,
    list,
    int,
    _TensorPlaceholder,  # tensors split out of that broadcast state (resuming with more than one process)
]

torch.serialization.add_safe_globals(SAFE_GLOBALS)
