"""The ``tupe-*`` console commands: their arguments (checked here, before torch is imported) and where
each one runs (the module imported when the command runs: torch and fairseq are loaded only then)."""
from __future__ import annotations

import argparse
import functools
import logging
import os
from typing import Callable, Dict, List, Optional, Tuple

from tupe_common.checkpoint_file import FIX, ORIGINAL_FIX, check_file
from .errors import require, run_command


def at_least(low: int) -> Callable[[str], int]:
    """argparse type: an integer >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is out of range: it must be at least {low}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


# Locality and symmetry need an inner row: 3 tokens at least ([CLS] and two more).
LENGTH = at_least(3)


def pos_maps_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tupe-pos-maps",
        description="The learned positional correlation of every head of a checkpoint: pos_maps.png (a heatmap "
        "per head, query rows, key columns, one colour scale), pos_logits.npy (raw logits), pos_probs.npy "
        "(their row softmax), and locality/symmetry per head.",
    )
    p.add_argument("checkpoint", help="a tupe_roberta checkpoint (any variant)")
    p.add_argument("--out-dir", required=True, help="where to write pos_maps.png and the .npy files")
    p.add_argument("--length", type=LENGTH, default=64,
                   help="tokens T (incl. [CLS]) to plot, 3 to the checkpoint's max positions (default 64)")
    p.add_argument("--force", action="store_true", help="overwrite maps already in --out-dir")
    return p


def locality_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tupe-locality",
        description="Locality and symmetry (Chen et al. 2023) of a checkpoint: per head on the position-only "
        "matrices, and with --text on the model's attention maps per layer and head.",
    )
    p.add_argument("checkpoint", help="a tupe_roberta checkpoint")
    p.add_argument("--length", type=LENGTH, default=128,
                   help="T for the position-only matrices, 3 to the checkpoint's max positions (default 128)")
    p.add_argument("--text", help="raw text, one sentence per line, for real attention maps")
    p.add_argument("--spm-model", default="", help="sentencepiece model of the checkpoint")
    p.add_argument("--data", default="", help="directory with the checkpoint's dict.txt")
    p.add_argument("--max-sentences", type=at_least(1), default=1000, help="sentences of --text to use (1000)")
    p.add_argument("--out-csv", help="write the table(s) here (a new file unless --force)")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out-csv")
    return p


def probe_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tupe-probe",
        description="Accuracy of a fine-tuned NLI model on the word-order probing sets, and the change "
        "against 'original' (sets from python -m tupe_preprocess.probing_sets).",
    )
    p.add_argument("checkpoint", help="a fine-tuned sentence_prediction checkpoint (NLI, 3 classes)")
    p.add_argument("--sets-dir", required=True, help="the folder of *.jsonl probing sets")
    p.add_argument("--data", required=True, help="the fine-tuning data dir (input0/, label/)")
    p.add_argument("--spm-model", required=True, help="sentencepiece model of the checkpoint")
    p.add_argument("--batch-size", type=at_least(1), default=64, help="pairs per forward pass (64)")
    p.add_argument("--out-csv", help="write the table here (a new file unless --force)")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out-csv")
    return p


def convert_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tupe-convert-original",
        description="Convert the original TUPE checkpoint (guolinke/TUPE, fairseq 2019 'bert' model) "
        "to a tupe_roberta checkpoint that fairseq-train/-validate and from_pretrained load.",
    )
    p.add_argument("input", help="the original checkpoint (e.g. checkpoint.pt from tupe_ckp.tar.gz)")
    p.add_argument("output", help="where to write the tupe_roberta checkpoint (e.g. tupe_r/model.pt)")
    p.add_argument("--dict", help="the release's dict.txt: checked against the embedding, copied next to OUTPUT")
    p.add_argument("--force", action="store_true", help="overwrite OUTPUT (and a different dict.txt beside it)")
    p.add_argument("--drop-heads", action="store_true", help="leave out any classification heads")
    p.add_argument("--inert-global", action="append", default=[], metavar="MODULE.NAME",
                   help="read this pickled class as an inert placeholder (training state the model does not "
                   "need; the 2019 fairseq.meters classes always are)")
    return p


def checkpoint_info_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tupe-checkpoint-info",
        description="What a tupe_roberta checkpoint is: its arch, positional variant and sizes (JSON).",
    )
    p.add_argument("checkpoint", nargs="?", help="a tupe_roberta checkpoint")
    p.add_argument("--fairseq-args", action="store_true", help="print the model flags for fairseq-train")
    p.add_argument("--list-variants", action="store_true",
                   help="print the variant registry's names with dashes (tupe-r, rope, ...), one per line")
    return p


def export_hf_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tupe-export-hf",
        description="Export a tupe_roberta checkpoint as a Hugging Face transformers folder: config.json, "
        "model.safetensors, the model code (loaded with trust_remote_code=True) and, with --spm-model, the "
        "tokenizer. AutoModel, AutoModelForMaskedLM and AutoModelForSequenceClassification load it; variants "
        "the exporter does not implement are refused by name (docs/hf_export.md).",
    )
    p.add_argument("checkpoint", help="tupe_roberta checkpoint (pre-trained or fine-tuned)")
    p.add_argument("out_dir", help="output folder (must be new or empty unless --force)")
    p.add_argument("--spm-model", help="the pre-training sentencepiece model: also export the tokenizer")
    p.add_argument("--dict", dest="dict_path",
                   help="fairseq dict.txt of the model (default: from the checkpoint's data dir)")
    p.add_argument("--head", help="classification head to export (default: the only one)")
    p.add_argument("--force", action="store_true", help="replace an existing OUT_DIR")
    return p


# What runs each command's parsed arguments: imported when the command runs (torch, fairseq), not when it parses.
def _pos_maps(a: argparse.Namespace) -> int:
    from .analysis.pos_maps_cli import run
    return run(a)


def _locality(a: argparse.Namespace) -> int:
    from .analysis.locality_cli import run
    return run(a)


def _probe(a: argparse.Namespace) -> int:
    from .analysis.probing_eval import run
    return run(a)


def _convert(a: argparse.Namespace) -> int:
    from .convert_original import run
    return run(a)


def _checkpoint_info(a: argparse.Namespace) -> int:
    from .checkpoint_info import run  # torch only: no fairseq
    return run(a)


def _export_hf(a: argparse.Namespace) -> int:
    from .hf.export import run
    return run(a)


Runner = Callable[[argparse.Namespace], int]
COMMANDS: Dict[str, Tuple[Callable[[], argparse.ArgumentParser], Runner]] = {
    "tupe-pos-maps": (pos_maps_parser, _pos_maps),
    "tupe-locality": (locality_parser, _locality),
    "tupe-probe": (probe_parser, _probe),
    "tupe-convert-original": (convert_parser, _convert),
    "tupe-checkpoint-info": (checkpoint_info_parser, _checkpoint_info),
    "tupe-export-hf": (export_hf_parser, _export_hf),
}


# The argument that names the checkpoint a command reads (the file is checked before torch is imported:
# checkpoints.check_file), and the optional packages a command needs (checked first: errors.require).
CHECKPOINT_ARGUMENT: Dict[str, Tuple[str, str]] = {**{command: ("checkpoint", FIX) for command in COMMANDS},
                                                 "tupe-convert-original": ("input", ORIGINAL_FIX)}
NEEDS: Dict[str, Tuple[str, ...]] = {"tupe-export-hf": ("safetensors", "transformers")}


def dispatch(command: str, argv: Optional[List[str]] = None) -> int:
    """Parse ``argv`` with the command's parser, check its packages and checkpoint file, then run the command.
    The libraries' log lines (fairseq, matplotlib) get fairseq-train's format and level, set before any import:
    otherwise a fairseq module's ``logging.basicConfig(level=DEBUG)`` on import sets them (our own lines:
    ``tupe_common.log``)."""
    make_parser, runner = COMMANDS[command]
    args = make_parser().parse_args(argv)
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", datefmt="%Y-%m-%d %H:%M:%S",
                        level=os.environ.get("LOGLEVEL", "INFO").upper())

    def run(a: argparse.Namespace) -> int:
        require(*NEEDS.get(command, ()))
        dest, fix = CHECKPOINT_ARGUMENT[command]
        if getattr(a, dest, None) is not None:
            check_file(getattr(a, dest), fix)
        return runner(a)

    return run_command(run, args)


# The console scripts (setup.py): f(argv=None) runs the command of that name.
pos_maps = functools.partial(dispatch, "tupe-pos-maps")
locality = functools.partial(dispatch, "tupe-locality")
probe = functools.partial(dispatch, "tupe-probe")
convert_original = functools.partial(dispatch, "tupe-convert-original")
checkpoint_info = functools.partial(dispatch, "tupe-checkpoint-info")
export_hf = functools.partial(dispatch, "tupe-export-hf")
