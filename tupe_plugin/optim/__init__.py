from . import warmup_ratio_schedule  # noqa: F401
