"""`from oomdoctor.integrations.hf import OomDoctorTrainerCallback` (code: oomdoctor.injob.integrations)."""
from oomdoctor.injob.integrations.hf import OomDoctorTrainerCallback

__all__ = ["OomDoctorTrainerCallback"]
