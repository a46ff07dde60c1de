"""Files copied into an exported model folder (loaded there by transformers with trust_remote_code)."""
