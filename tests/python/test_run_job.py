"""_job.run_job, the conversion both fronts make of a job: the policy's rules checked once, on the first conversion
(before the accuracy fallback runs any converted model), whatever number of conversions the search then makes."""
import pytest
import torch

import torch_mp
from torch_mp import _job
from torch_mp._torchscript.conversion import Conversion
from torch_mp._export.conversion import ProgramConversion

FRONTS = {"convert": (torch_mp.convert, Conversion), "export": (torch_mp.export, ProgramConversion)}


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 32), torch.nn.GELU(),
                               torch.nn.Linear(32, 4)).eval()


@pytest.mark.parametrize("front", FRONTS)
def test_a_rule_matching_nothing_is_refused_before_the_fallback_runs_a_converted_model(front, monkeypatch):
    convert, job_type = FRONTS[front]
    runs = []
    monkeypatch.setattr(job_type, "call", lambda self, module, inputs: runs.append(inputs))
    policy = torch_mp.OpPolicy.default("cpu_fp16").exclude("head*")
    with pytest.raises(ValueError, match=r"policy.exclude\('head\*'\) matches no node of the model"):
        convert(mlp(), (torch.randn(4, 16),), torch.float16, policy=policy, tolerance=1e-9)
    assert not runs


@pytest.mark.parametrize("front", FRONTS)
def test_the_rules_are_checked_once_however_many_conversions_the_fallback_makes(front, monkeypatch):
    convert = FRONTS[front][0]
    checked = []
    monkeypatch.setattr(_job, "check_rules_match", lambda policy, nodes: checked.append(len(nodes)))
    policy = torch_mp.OpPolicy.default("cpu_fp16").exclude("0")
    report = torch_mp.report_of(convert(mlp(), (torch.randn(4, 16),), torch.float16, policy=policy, tolerance=1e-6,
                                        calibration_inputs=[torch.randn(4, 16)]))
    assert report.data["fallback"]["conversions"] > 1
    assert checked == [len(report.nodes)]
