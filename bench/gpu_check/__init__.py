"""``make gpu-check``: everything that needs CUDA, checked and measured in one command, with one markdown report
and one CSV written into ``--out`` even when a step fails (the failure is in the report).

Sections (``sections.SECTIONS``, one module each), each in its own process with a time limit (a crash or a hang
of one is reported, the others run):

- ``environment``: the wheels of ``--wheels`` installed offline into ``--site`` (``bench/gpu_wheels.py``; the
  machine's torch is never touched), then versions (Python, torch, CUDA, cuDNN, fairseq) and the card.
- ``cuda_tests``: the tests of ``tests/`` that need CUDA; on a GPU none may be skipped.
- ``sdpa``: every registered variant in fp32, bf16 and fp16: the SDPA path against the explicit path, both against
  float64; the SDPA kernels taken; the masks SDPA gets and a sequence of padding only.
- ``attention``: one attention layer's core on every path (``sdpa``, ``explicit``, ``triton``, ``flex``) x bias x
  dropout x padding, timed, after the Triton path's errors against float64.
- ``verdict``: TUPE-R's shared and DeBERTa's per-sequence bias (padded, dropout 0.1) on the Triton kernel against
  0.74 ms and ``bench/kernel_sass.py``'s realistic estimate, with the SDPA baseline's backend, the Triton version,
  the tiles and the self-check.
- ``train``: a short real pre-training of ``tupe_r_base`` in fp16 (``fairseq-train``) and bf16
  (``fairseq-hydra-train``): the loss falls, overflow skips are counted.
- ``throughput``: ``train_scripts/pretrain.sh`` itself on one GPU for RoBERTa, BERT-A and TUPE-R: fairseq's ``wps``
  and MFU.
- ``sync``: the device-to-host synchronisations of one MLM and one ELECTRA train step, with their sites.
- ``timing``: one train step of each variant against fairseq's RoBERTa: ratios, tokens/s, MFU, peak memory. It
  comes last, takes what is left of the budget and reports the rows it did not reach.

The whole check keeps to ``--budget-s`` (540 s, inside a borrowed machine's 10-minute command limit; docs/gpu.md
gives each section's share); each section gets at most its ``limit_s`` and what is left. ``--quick`` (``make
gpu-check QUICK=1``): environment, attention (T=512 with training's padding, no FlexAttention), verdict, throughput (RoBERTa
and TUPE-R) and timing (a few variants at T=512, TUPE-R at 1024) within 240 s, so that one short GPU loan also
holds the GPU study. On a machine without CUDA it says so in one line and exits 1. ``--dry-run`` runs the same
sections on CPU at tiny size (``settings.DRY_RUN``; one thread per process, the Triton kernels in Triton's
interpreter, fp32 training, the sync count of the ops that would sync); tests/test_gpu_check.py runs it. Exit
status: 0 when every section passed, 1 otherwise, 2 for usage errors.

    python bench/gpu_check --out $OUT                 # on the GPU machine (make gpu-check OUT=...)
    python bench/gpu_check --out /tmp/dry --dry-run   # the CPU rehearsal
"""
