"""The hydra pre-training config's batch check: fairseq-hydra-train resolves its config before it imports
the plugin, so hydra cannot compute ``update_freq`` from the number of processes; the model checks the
sequences per update when it is built (``TupeRobertaModel.build_model``) instead."""
from __future__ import annotations


def check_target_batch_size(model_cfg) -> None:
    """``model.target_batch_size: N`` in a hydra config (the pre-training config sets the paper's 256): refuse
    a run whose sequences per update (processes x dataset.batch_size x optimization.update_freq) differ,
    naming the numbers and the update_freq that gives N, as ``train_scripts/pretrain.sh`` computes it."""
    target = model_cfg.get("target_batch_size")
    root = model_cfg._get_root()
    if not target or root is model_cfg or "optimization" not in root:
        return
    world = max(1, root.distributed_training.distributed_world_size or 1)
    per_gpu, update_freq = root.dataset.batch_size, root.optimization.update_freq[0]
    if per_gpu is None:
        raise ValueError(f"model.target_batch_size={target} needs a fixed dataset.batch_size (sentences per process)")
    if world * per_gpu * update_freq == target:
        return
    per_update = world * per_gpu
    fix = (f"pass optimization.update_freq=[{target // per_update}]" if target % per_update == 0 else
           f"{target} is not divisible by {per_update}: change dataset.batch_size or the number of processes")
    raise ValueError(
        f"batch of {world} process(es) x dataset.batch_size {per_gpu} x optimization.update_freq {update_freq} = "
        f"{per_update * update_freq} sequences, not model.target_batch_size={target}: {fix} "
        "(or model.target_batch_size=null to train with another batch)"
    )
