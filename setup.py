from setuptools import find_packages, setup

setup(
    name="tupe_plugin",
    version="0.1.0",
    description="TUPE (Ke et al., ICLR 2021) RoBERTa encoders as a fairseq user-dir plugin, "
    "with C4/GLUE pipelines and positional-encoding analysis",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["tupe_plugin", "tupe_plugin.*", "preprocess", "preprocess.*", "glue", "glue.*"]),
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
    ],
    extras_require={
        "test": ["pytest>=7", "scikit-learn>=1.2"],
        # Hugging Face bridge (tupe-export-hf, Trainer) and the hub downloads (C4, GLUE/SNLI parquet)
        "hf": ["transformers>=5.0", "safetensors>=0.4", "accelerate>=1.0", "huggingface_hub>=1.0", "pyarrow>=15"],
    },
    entry_points={
        "console_scripts": [
            "tupe-checkpoint-info=tupe_plugin.checkpoint_info:main",
            "tupe-pos-maps=tupe_plugin.analysis.pos_maps_cli:main",
            "tupe-locality=tupe_plugin.analysis.locality_cli:main",
            "tupe-probe=tupe_plugin.analysis.probing_eval:main",
            "tupe-convert-original=tupe_plugin.convert_original:main",
            "tupe-export-hf=tupe_plugin.hf.export:main",
        ]
    },
)
