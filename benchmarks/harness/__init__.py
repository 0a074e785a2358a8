"""The benchmarks' shared machinery: a script under benchmarks/ keeps its cases and baselines, the harness does the
rest.

- timing: interleaved rounds over callables (warm-up, medians) on torch.utils.benchmark's clock; GPU time by CUDA
  events; a time limit for a call that may run away
- cells: a session with a deadline, each cell's result written as JSON when it finishes, a rerun skips finished cells;
  JSON written whole or not at all
- outputs: first output, all floating outputs, cosine and largest error against the reference
- machine: what the page says ran it (CPU or GPU name, cores, torch_mp.cpu_features, nvidia-smi, commit), other
  processes' load
- render: markdown tables, the page header (machine, date, torch, command), publishing to a page

Results go to benchmarks/results/ (RESULTS: the folder), one page per script.

A script imports it as `from harness import ...` with benchmarks/ on sys.path (the case when it runs as
`python benchmarks/<script>.py`).
"""
import os

from .cells import Session, write_json
from .machine import Machine, NeighbourLoad, cpu_name, git_commit, nvidia_smi
from .outputs import compare, cosine, first, flat_output
from .render import command_line, machine_line, markdown_table, page_header, publish
from .timing import Timing, Timeout, interleaved_medians, time_interleaved, time_limit, with_timeout

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")

__all__ = ["RESULTS", "Machine", "NeighbourLoad", "Session", "Timeout", "Timing", "command_line", "compare", "cosine",
           "cpu_name", "first", "flat_output", "git_commit", "interleaved_medians", "machine_line", "markdown_table",
           "nvidia_smi", "page_header", "publish", "time_interleaved", "time_limit", "with_timeout", "write_json"]
