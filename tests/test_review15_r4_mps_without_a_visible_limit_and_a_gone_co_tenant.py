"""JUDGEMENT CALL (medium): MPS present, no pinned limit visible (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT unset;
a daemon default cannot be read), and the message leaves 63 GiB unexplained. That is either a daemon-default
limit (validation's mps_pinned_default) or a co-tenant the message could not list and that has left before
`--here` ran (NVML sees nothing now). _mps_weight gives the limit 3.5 and the answer reads 0.89 sure of it;
the project's own `doctor` check (checks/sharing.py SHR002) says of MPS without a known limit "clients share
the GPU's memory without isolation" (OTHER_PROCESS). Two readings the facts cannot tell apart should not
give one of them ~0.9. (--here reads NVML after the failure: a finished co-tenant is the ordinary case.)"""


from oomdoctor.explain.rank import explain_text  # noqa: E402
from test_review15_r3_mps_known_limit_contradicts_the_message import _facts, _log  # noqa: E402


def test_no_visible_limit_and_no_process_now_is_not_a_sure_limit():
    ex = explain_text(_log(), _facts(None))
    conf = {h.category: h.confidence for h in ex.hypotheses}
    assert conf.get("gpu_sharing_limit", 0) < 0.8, conf
    assert conf.get("other_process", 0) >= 0.15, conf
