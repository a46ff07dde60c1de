"""``fairseq-train`` with exactly N validations per epoch, evenly spaced, the last at the epoch's end.

    python -m tupe_glue.fairseq_train --validations-per-epoch 2 DATA --user-dir tupe_plugin ...   # any fairseq-train args
    python -m tupe_glue.fairseq_train --validations-per-epoch 2 --hydra --config-dir ... --config-name glue ...
                                                              # the same for fairseq-hydra-train

The TUPE release validates twice per epoch (``docs/glue_protocol.md`` §4). fairseq's
``--validate-interval-updates K`` counts updates from the start of training, so with an odd number of
updates per epoch its validations drift across epoch boundaries (3 updates/epoch, K=2: updates 2, 3,
4, 6 instead of 2, 3, 5, 6). Here, with U updates in the epoch (batches per process, grouped by
``--update-freq``, as fairseq's own loop groups them), validation k of N-1 mid-epoch ones runs after
update ``ceil(k*U/N)`` of the epoch, and the last at the epoch's end (``--validate-interval 1``). Every
process computes the same points, so several GPUs validate together. A mid-epoch validation is a
mid-epoch save point too, so ``checkpoint_best.pt`` follows every validation (unless ``--no-save``).

This wraps fairseq's training loop without copying it: ``fairseq_cli.train.validate_and_save`` is
called as it is, with ``save_interval_updates`` set to the current update for the mid-epoch calls. The
wrapper is installed by the training entry point itself (:func:`main_with_validations`, N in the
environment), so it also holds in the processes fairseq spawns for several GPUs of one node.

Over-long examples: fairseq's trainer drops training examples longer than the model's positions with a warning
only, while validation refuses them unless ``--skip-invalid-size-inputs-valid-test``. Here training follows
validation's rule (:func:`install_size_rule`): an over-long example stops the run, naming how many there are and the
fixes, unless that option is given (then both drop them, as in fairseq).
"""
import math
import os
import sys
from typing import List, NoReturn, Optional, Sequence

from omegaconf import open_dict

TRAINS_WITH_FAIRSEQ = True  # run as __main__, this process trains: tupe_plugin.graceful_stop catches its stops

OPTION = "--validations-per-epoch"
ENV = "TUPE_VALIDATIONS_PER_EPOCH"  # N for the training processes (inherited by spawned ones)


def mid_epoch_updates(updates_per_epoch: int, validations: int) -> List[int]:
    """Updates of an epoch (1-based) after which to validate, the end of the epoch excluded."""
    points = {math.ceil(k * updates_per_epoch / validations) for k in range(1, validations)}
    return sorted(p for p in points if 0 < p < updates_per_epoch)


def epoch_position(cfg, epoch_itr) -> tuple:
    """(updates done in this epoch, updates in this epoch) of fairseq's training loop, from its batch counts."""
    epoch = epoch_itr.epoch
    freqs = cfg.optimization.update_freq
    update_freq = freqs[epoch - 1] if epoch <= len(freqs) else freqs[-1]
    batches = len(epoch_itr)  # batches of this process (shards are padded to equal length)
    rounding = math.floor if cfg.optimization.skip_remainder_batch else math.ceil
    return math.ceil(epoch_itr.iterations_in_epoch / update_freq), rounding(batches / update_freq)


def install(validations: int) -> None:
    """Make ``fairseq_cli.train``'s loop validate ``validations`` times per epoch (once per process)."""
    from fairseq_cli import train as train_cli

    original = train_cli.validate_and_save
    if validations < 2 or getattr(original, "validations_per_epoch", None) == validations:
        return

    def validate_and_save(cfg, trainer, task, epoch_itr, valid_subsets, end_of_epoch):
        done, total = epoch_position(cfg, epoch_itr)
        if end_of_epoch or done not in mid_epoch_updates(total, validations):
            return original(cfg, trainer, task, epoch_itr, valid_subsets, end_of_epoch)
        keep = cfg.checkpoint.save_interval_updates
        with open_dict(cfg.checkpoint):
            cfg.checkpoint.save_interval_updates = max(1, trainer.get_num_updates())  # a save point: validate
        try:
            return original(cfg, trainer, task, epoch_itr, valid_subsets, end_of_epoch)
        finally:
            with open_dict(cfg.checkpoint):
                cfg.checkpoint.save_interval_updates = keep

    validate_and_save.validations_per_epoch = validations
    train_cli.validate_and_save = validate_and_save


class OverLongInputs(Exception):
    """Examples longer than the model's positions, where no option says to drop them."""


def install_size_rule(skip: bool) -> None:
    """Make every split's size filter (fairseq's ``FairseqTask.filter_indices_by_size``) refuse over-long examples
    unless ``skip`` (``--skip-invalid-size-inputs-valid-test``): fairseq's trainer asks it to drop them from the
    training split with only a warning, examples the fine-tuning then never sees."""
    from fairseq.tasks import FairseqTask

    original = getattr(FairseqTask.filter_indices_by_size, "original", FairseqTask.filter_indices_by_size)

    def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
        if skip or max_positions is None:
            return original(self, indices, dataset, max_positions, ignore_invalid_inputs or skip)
        kept, ignored = dataset.filter_indices_by_size(indices, max_positions)
        if len(ignored):
            split = next((k for k, d in getattr(self, "datasets", {}).items() if d is dataset), "a split")
            raise OverLongInputs(
                f"{len(ignored)} of the {len(indices)} examples of {split} are longer than the model's positions "
                f"(max_positions={max_positions}; the first, #{ignored[0]}, has {dataset.size(ignored[0])} tokens): "
                "TRUNCATE=1 cuts them as the TUPE release does (--shorten-method truncate), or "
                "--skip-invalid-size-inputs-valid-test drops them from training and validation")
        return kept

    filter_indices_by_size.original = original
    FairseqTask.filter_indices_by_size = filter_indices_by_size


def main_with_validations(cfg, **kwargs):
    """fairseq's ``train.main`` with the validation points of ``$TUPE_VALIDATIONS_PER_EPOCH`` installed, and
    over-long training examples refused as validation's are (:func:`install_size_rule`)."""
    from fairseq_cli import train as train_cli

    install(int(os.environ.get(ENV, "1")))
    install_size_rule(bool(cfg.dataset.skip_invalid_size_inputs_valid_test))
    return getattr(train_cli, "original_main", train_cli.main)(cfg, **kwargs)


def usage_error(message: str) -> NoReturn:
    """Exit 2 (a usage error, as argparse and fairseq-train's own parser) with one ``error:`` line."""
    print(f"tupe_glue.fairseq_train: error: {message}", file=sys.stderr)
    sys.exit(2)


def split_option(argv: Sequence[str]) -> tuple:
    """(N, hydra, the other arguments): N from ``--validations-per-epoch N`` (or ``=N``, 1 when absent),
    hydra when ``--hydra`` is given (run fairseq-hydra-train's entry point instead of fairseq-train's)."""
    rest, n, hydra = [], 1, False
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--hydra":
            hydra = True
        elif a == OPTION or a.startswith(OPTION + "="):
            value = a.split("=", 1)[1] if "=" in a else (args.pop(0) if args else "")
            if not value.isdigit() or int(value) < 1:
                usage_error(f"{OPTION} needs a whole number >= 1, not {value!r}")
            n = int(value)
        else:
            rest.append(a)
    return n, hydra, rest


def main(argv: Optional[Sequence[str]] = None) -> None:
    n, hydra, rest = split_option(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in rest):
        print(__doc__)
    if n > 1 and any(a.startswith(("--validate-interval-updates", "dataset.validate_interval_updates")) for a in rest):
        usage_error(f"{OPTION} and validate_interval_updates both place validations; pass one of them")
    os.environ[ENV] = str(n)
    # fairseq_cli.train first: its logging.basicConfig (time | level | name, INFO, LOGLEVEL) must be the first
    # one, as in fairseq-train; importing fairseq before it (hydra_train does) runs a fairseq model module's
    # basicConfig(level=DEBUG) instead: no timestamps and DEBUG lines in every train.log
    from fairseq_cli import train as train_cli

    from tupe_glue.fairseq_train import main_with_validations as entry  # by its module name, not __main__

    # the entry points call train.main (hydra: as pre_main) once per process, spawned ones included
    train_cli.original_main, train_cli.main = train_cli.main, entry
    sys.argv = [sys.argv[0]] + rest
    if not hydra:
        train_cli.cli_main()
        return
    from fairseq_cli import hydra_train

    hydra_train.pre_main = entry
    hydra_train.cli_main()


if __name__ == "__main__":
    main()
