"""Tasks of the plugin: ``electra`` (replaced-token detection pre-training)."""
from .electra import ElectraTask  # noqa: F401
