"""`from oomdoctor.integrations.lightning import OomDoctorCallback` (code: oomdoctor.injob.integrations)."""
from oomdoctor.injob.integrations.lightning import OomDoctorCallback

__all__ = ["OomDoctorCallback"]
