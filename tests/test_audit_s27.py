"""GIVEN the files of the session-27 new-user walkthrough WHEN audited THEN one file that audit cannot read
does not stop the others, `docker run` inside an echo'd string is not a command, -o picks the format and
refuses a directory, and the Kubernetes rules see every container the API server would check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomdoctor.checks.audit import audit
from oomdoctor.cli import main
from oomdoctor.collectors.configs import load_config
from oomdoctor.parsers.config_file import parse_config

FIX = Path(__file__).parent / "fixtures" / "audit_s27"


def _ids(name: str) -> list[str]:
    return [a.finding.id for a in audit(load_config(str(FIX / name)))]


# 1. one file audit cannot handle is skipped, the rest audited


def test_an_unhandled_file_is_skipped_and_the_others_are_audited(capsys, tmp_path):
    bad = tmp_path / "notes.sh"
    bad.write_text("#!/bin/sh\necho hello\n")
    files = [str(FIX / "pytorchjob.yaml"), str(bad), str(FIX / "hami-deploy.yaml")]
    assert main(["audit", "--format", "json", *files]) == 1  # the findings decide, not the skipped file
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert [f["path"] for f in doc["files"]] == [files[0], files[2]]
    assert any(f["findings"] for f in doc["files"])
    [skip] = doc["skipped"]
    assert skip["path"] == str(bad) and skip["reason"].startswith("no `docker run` / `podman run` command found")
    assert f"skipped {bad}" in out.err and out.err.count("\n") == 1

    assert main(["audit", *files]) == 1
    text = capsys.readouterr().out
    assert f"{bad}  (skipped: " in text and "1 file(s) skipped" in text and "pytorchjob.yaml  (kubernetes" in text


def test_every_file_skipped_is_exit_2_in_one_line(capsys, tmp_path):
    a, b = tmp_path / "a.sh", tmp_path / "b.yaml"
    a.write_text("#!/bin/sh\necho hello\n")
    b.write_text("just words\n")
    assert main(["audit", "--format", "json", str(a), str(b)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and str(a) in out.err and str(b) in out.err


# 2. `docker run` is found as a command, not inside a quoted string


def test_a_docker_run_in_an_echoed_usage_string_is_not_a_command():
    cfg = load_config(str(FIX / "echo-usage.sh"))
    assert [w.line for w in cfg.workloads] == [3] and cfg.notes == []
    assert cfg.workloads[0].containers[0].image == "myimage"
    assert [w.line for w in load_config(str(FIX / "echo2.sh")).workloads] == [3]  # log "starting: docker run x"


@pytest.mark.parametrize("script,lines", [
    ('bash -lc "docker run --gpus all img python t.py"\n', [1]),
    ("ssh node1 'cd /w && docker run --gpus all img python t.py'\n", [1]),
    ("echo docker run --gpus all img\nsudo docker run --gpus all img python t.py\n", [2]),
    ("X=1 nohup docker run --gpus all img python t.py &\nprintf '%s' \"docker run --gpus all\"\n", [1]),
    ("if true; then docker run --gpus all img; fi\n", [1]),
    ('CMD="docker run --gpus all img python t.py"\n$CMD\nMSG="see: docker run --help"\n', [1]),
])
def test_command_positions(script, lines):
    cfg = parse_config("#!/bin/sh\n" + script, "x.sh")
    assert [w.line - 1 for w in cfg.workloads] == lines
    assert all(w.containers[0].image == "img" for w in cfg.workloads)


def test_an_unparseable_candidate_is_skipped_with_a_note(capsys, tmp_path):
    p = tmp_path / "x.sh"
    p.write_text("#!/bin/sh\ndocker run --gpus all 'broken\ndocker run --gpus all img python t.py --num-workers 8\n")
    assert main(["audit", "--format", "json", str(p)]) == 1
    out = capsys.readouterr()
    [f] = json.loads(out.out)["files"]
    assert [a["id"] for a in f["findings"]] == ["AUD001"] and f["findings"][0]["line"] == 3
    assert f["notes"] == ["line 2: cannot parse the docker run command (No closing quotation); skipped"]
    assert "line 2: cannot parse" in out.err


# 5. -o picks the format from its extension and refuses a directory


@pytest.mark.parametrize("name,start", [("a.json", '{\n  "schema_version"'), ("a.html", "<!doctype html>"),
                                         ("a.txt", str(FIX / "hami-deploy.yaml"))])
def test_audit_output_format_follows_the_extension(tmp_path, capsys, name, start):
    out = tmp_path / name
    main(["audit", str(FIX / "hami-deploy.yaml"), "-o", str(out)])
    assert out.read_text().startswith(start)


def test_audit_fix_output_is_the_patched_copy_not_a_report(tmp_path, capsys):
    src = tmp_path / "pod.yaml"
    src.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n"
                   "    image: nvcr.io/nvidia/pytorch:24.05-py3\n    command: [python, train.py, --num-workers, '4']\n"
                   "    resources:\n      limits:\n        nvidia.com/gpu: 1\n        memory: 64Gi\n"
                   "      requests:\n        memory: 64Gi\n")
    out = tmp_path / "fixed.json"  # a name that would pick JSON for a report: here it is the patched copy
    assert main(["audit", "--fix", "-o", str(out), str(src)]) == 0
    report = capsys.readouterr().out
    assert "AUD001" in report and "[fixed]" in report and not report.lstrip().startswith("{")
    assert "/dev/shm" in out.read_text() and "schema_version" not in out.read_text()


@pytest.mark.parametrize("argv", [
    ["audit", str(FIX / "hami-deploy.yaml")],
    ["fleet", str(Path(__file__).parent / "fixtures" / "reports")],
    ["explain", str(Path(__file__).parent / "fixtures" / "audit_s27" / "cvd.sh")],
])
@pytest.mark.parametrize("existing", [False, True])
def test_output_that_is_a_directory_is_refused(tmp_path, capsys, argv, existing):
    target = tmp_path / "out"
    if existing:
        target.mkdir()
    arg = str(target) if existing else str(target) + "/"
    assert main([*argv, "-o", arg]) == 2
    err = capsys.readouterr().err
    assert "is a directory" in err and err.count("\n") == 1
    assert not target.is_file()


# 4. a request above its limit is refused by the API server; init containers are audited


CONFIGS = Path(__file__).parent / "fixtures" / "configs"


def test_request_above_limit_is_an_error_not_a_qos_note():
    [a] = audit(load_config(str(CONFIGS / "pod-request-over-limit.yaml")))
    assert (a.finding.id, a.finding.severity.value) == ("AUD015", "error")
    assert "32Gi > limits.memory 16Gi" in a.finding.title and a.line == 6
    pod = ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: busybox\n"
           "    resources: {requests: {cpu: '4', memory: 1Gi}, limits: {cpu: 2000m, memory: 1Gi}}\n")
    assert [(a.finding.id, a.finding.evidence[0].fact) for a in audit(parse_config(pod, "p.yaml"))] == [
        ("AUD015", "resources.requests.cpu")]
    equal = pod.replace("cpu: '4'", "cpu: '2'")
    assert audit(parse_config(equal, "p.yaml")) == []


def test_init_containers_are_audited_like_containers():
    found = audit(load_config(str(CONFIGS / "pod-gpu-init-container.yaml")))
    assert {(a.finding.id, a.container) for a in found} == {
        ("AUD001", "convert-ckpt"), ("AUD007", "convert-ckpt"), ("AUD005", "convert-ckpt")}


# 6. NVIDIA_VISIBLE_DEVICES by hand is the plain-Docker way to pick GPUs; only a device plugin can be bypassed


def test_nvidia_visible_devices_in_compose_and_docker_run_is_not_flagged():
    assert _ids("compose-runtime.yml") == []
    found = audit(load_config(str(FIX / "cvd.sh")))
    assert [(a.finding.id, a.line) for a in found] == [("AUD013", 1)]  # the out-of-range index stays


def test_nvidia_visible_devices_by_hand_in_a_pod_is_still_an_error():
    assert {a.finding.id for a in audit(load_config(str(CONFIGS / "pod-nvidia-visible-all.yaml")))} == {"AUD013"}


def test_cuda_visible_devices_indexes_the_gpus_nvidia_visible_devices_picked_under_the_nvidia_runtime():
    run = "docker run --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=1 -e CUDA_VISIBLE_DEVICES={} --shm-size=8g img python a.py\n"
    [a] = audit(parse_config(run.format(1), "r.sh"))
    assert a.finding.id == "AUD013" and "has 1 GPU(s)" in a.finding.title
    assert audit(parse_config(run.format(0), "r.sh")) == []


# 3. Slurm batch scripts


def test_a_slurm_batch_script_is_audited_for_its_gpus_and_memory(capsys):
    cfg = load_config(str(FIX / "train.sbatch"))
    assert cfg.type == "slurm"
    [c] = cfg.workloads[0].containers
    assert c.gpu_count == 8 and c.memory_limit == 64 * 2**30 and "--mem=64G" in c.memory_limit_source
    [a] = audit(cfg)  # 8 GiB per GPU passes AUD005; /dev/shm is the host's: no AUD001
    assert a.finding.id == "AUD013" and "names device 8" in a.finding.title and "per node" in a.finding.title
    assert main(["audit", "--format", "json", str(FIX / "train.sbatch")]) == 1
    out = capsys.readouterr().out
    assert "hf_abcdEFGH" not in out and "S3cr3t" not in out


@pytest.mark.parametrize("lines,mem,gpus", [
    (["--gres=gpu:a100:4", "--mem-per-cpu=1G", "-c 2"], 2 * 2**30, 4),
    (["--gpus-per-node=2", "--mem-per-gpu=1500"], 3000 * 2**20, 2),
    (["--nodes=1", "-G 1", "--mem 2G"], 2 * 2**30, 1),
])
def test_slurm_memory_per_node_against_the_gpus(lines, mem, gpus):
    text = "#!/bin/bash\n" + "".join(f"#SBATCH {ln}\n" for ln in lines) + "srun python train.py\n"
    cfg = parse_config(text, "job.sbatch")
    [c] = cfg.workloads[0].containers
    assert (c.memory_limit, c.gpu_count) == (mem, gpus)
    assert [a.finding.id for a in audit(cfg)] == (["AUD005"] if mem < gpus * 4 * 2**30 else [])


@pytest.mark.parametrize("lines,mem,gpus", [
    # review repro: 8 tasks x 4 CPUs x 3G on one node is 96 GiB, not 12
    (["--nodes=1", "--ntasks=8", "--cpus-per-task=4", "--gres=gpu:8", "--mem-per-cpu=3G"], 96 * 2**30, 8),
    (["-N 2", "-n 8", "-c 1", "--gres=gpu:4", "--mem-per-cpu=1G"], 4 * 2**30, 4),  # 4 tasks a node: still low
    (["--ntasks=1", "-c 2", "--gres=gpu:1", "--mem-per-cpu=1G"], 2 * 2**30, 1),
    (["--cpus-per-gpu=2", "--gres=gpu:4", "--mem-per-cpu=1G"], 8 * 2**30, 4),
    (["--cpus-per-gpu=8", "--gres=gpu:4", "--mem-per-cpu=2G"], 64 * 2**30, 4),
    (["--ntasks=8", "--gres=gpu:8", "--mem-per-cpu=1G"], None, 8),  # nodes unknown: so is the memory
    (["--nodes=3", "--ntasks=8", "--gres=gpu:8", "--mem-per-cpu=1G"], None, 8),  # uneven spread
    (["--nodes=2-4", "--ntasks=8", "--gres=gpu:8", "--mem-per-cpu=1G"], None, 8),
    (["--cpus-per-gpu=4", "--mem-per-cpu=1G"], None, None),  # CPUs per GPU, GPUs unknown
    (["--nodes=1", "--ntasks=4", "--gpus-per-task=1", "--mem-per-gpu=2G"], 8 * 2**30, 4),  # tasks from --ntasks
])
def test_mem_per_cpu_counts_the_cpus_of_every_task_on_the_node(lines, mem, gpus):
    text = "#!/bin/bash\n" + "".join(f"#SBATCH {ln}\n" for ln in lines) + "srun python train.py\n"
    cfg = parse_config(text, "job.sbatch")
    [c] = cfg.workloads[0].containers
    assert (c.memory_limit, c.gpu_count) == (mem, gpus)
    low = mem is not None and gpus is not None and mem < gpus * 4 * 2**30
    assert [a.finding.id for a in audit(cfg)] == (["AUD005"] if low else [])


def test_sbatch_mem_bounds_a_docker_run_without_a_limit_of_its_own():
    [w] = load_config(str(FIX / "train-slurm-docker.sh")).workloads
    c = w.containers[0]
    assert c.memory_limit == 32 * 2**30 and c.memory_limit_source == "#SBATCH --mem=32G"
    own = parse_config("#!/bin/bash\n#SBATCH --mem=32G\ndocker run -m 4g --gpus 2 --shm-size=1g img python t.py\n", "x.sh")
    c = own.workloads[0].containers[0]
    assert c.memory_limit == 4 * 2**30 and not c.memory_limit_source
    assert [a.finding.id for a in audit(own)] == ["AUD005"]


def test_a_script_with_neither_says_which_inputs_are_supported(tmp_path, capsys):
    p = tmp_path / "x.sh"
    p.write_text("#!/bin/sh\nsrun python train.py\n")
    assert main(["audit", str(p)]) == 2
    assert "Slurm batch scripts" in capsys.readouterr().err
