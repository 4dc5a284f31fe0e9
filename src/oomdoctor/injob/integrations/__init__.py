"""Training-framework callbacks that mark steps for the recorder. Each module imports its framework, so
import `oomdoctor.injob.integrations.lightning` or `.hf` only where Lightning or transformers is installed."""
