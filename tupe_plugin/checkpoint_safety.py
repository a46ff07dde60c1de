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
from omegaconf import DictConfig, ListConfig
from omegaconf.base import ContainerMetadata, Metadata
from omegaconf.nodes import AnyNode, BooleanNode, EnumNode, FloatNode, IntegerNode, StringNode

SAFE_GLOBALS = [
    argparse.Namespace,
    DictConfig,
    ListConfig,
    ContainerMetadata,
    Metadata,
    AnyNode,
    BooleanNode,
    EnumNode,
    FloatNode,
    IntegerNode,
    StringNode,
    typing.Any,
    dict,
    list,
    int,
    collections.defaultdict,
]

torch.serialization.add_safe_globals(SAFE_GLOBALS)
