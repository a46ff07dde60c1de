"""``fairseq-train`` with ``--bf16`` kept as bf16 on a GPU: ``python -m tupe_pretrain.fairseq_train ARGS...``.

fairseq 0.12's command line (``fairseq/options.py``) sets ``--tpu`` whenever ``--bf16`` is given, and a TPU run
cannot start on a GPU; ``fairseq-hydra-train``'s ``common.bf16=true`` has no such step. This parses the arguments
with fairseq's own parser, clears that ``--tpu`` (a TPU run passes ``--tpu`` itself) and runs fairseq-train's main.
``train_scripts/pretrain.sh`` runs it with ``BF16=1``; ``bench/gpu_check`` measures through it.
"""
from __future__ import annotations

import sys
from typing import List, Optional


TRAINS_WITH_FAIRSEQ = True  # run as __main__, this process trains: tupe_plugin.graceful_stop catches its stops

def config_keeping_bf16(argv: List[str]):
    """fairseq-train's config for ``argv``, as its own parser makes it, but ``--bf16`` without ``--tpu`` unless
    ``--tpu`` is in ``argv``."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    args.tpu = "--tpu" in argv
    return convert_namespace_to_omegaconf(args)


def main(argv: Optional[List[str]] = None) -> None:
    from fairseq.distributed import utils as distributed_utils
    from fairseq_cli.train import main as train

    distributed_utils.call_main(config_keeping_bf16(sys.argv[1:] if argv is None else list(argv)), train)


if __name__ == "__main__":
    main()
