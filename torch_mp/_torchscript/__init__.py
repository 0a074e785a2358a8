"""The TorchScript front, beside the export front (_export/): conversion.py (torch_mp.convert and prepare: capture by
script, else trace, held to the eager model by capture_check.py; the C++ pipeline on a frozen copy; the job
interface, _job.ConversionJob, that _job.run_job runs), jit_pass.py (torch_mp.jit_pass, the load-time pass), and
jit_calls.py (the torch.jit calls torch_mp makes for the user, without torch's deprecation warnings; torch_mp.save).
What both fronts share stays in torch_mp/: _job.py, fallback.py, finite_outputs.py, capture_check.py, _inputs.py,
and the loading of either front's output (_load.py, cuda_graphs.py).
"""
