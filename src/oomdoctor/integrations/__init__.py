"""Stable import path for the training-framework callbacks; the code is in `oomdoctor.injob.integrations`.
Import `oomdoctor.integrations.lightning` or `.hf` only where Lightning or transformers is installed."""
