"""The benchmarks' shared machinery: a script under benchmarks/ keeps its cases and baselines, the harness does the
rest.

- timing: interleaved rounds over callables (warm-up, medians) on torch.utils.benchmark's clock; GPU time by CUDA events
- cells: a session with a deadline, each cell's result written as JSON when it finishes, a rerun skips finished cells
- outputs: first output, all floating outputs, cosine against the reference
- machine: what the page says ran it (CPU or GPU name, cores, torch_mp.cpu_features), other processes' load
- render: markdown tables, the page header (machine, date, torch, command), publishing to a page

A script imports it as `from harness import ...` with benchmarks/ on sys.path (the case when it runs as
`python benchmarks/<script>.py`).
"""
from .cells import Session
from .machine import Machine, NeighbourLoad, cpu_name
from .outputs import cosine, first, flat_output
from .render import command_line, machine_line, markdown_table, page_header, publish
from .timing import Timing, Timeout, interleaved_medians, time_interleaved, with_timeout

__all__ = ["Machine", "NeighbourLoad", "Session", "Timeout", "Timing", "command_line", "cosine", "cpu_name", "first",
           "flat_output", "interleaved_medians", "machine_line", "markdown_table", "page_header", "publish",
           "time_interleaved", "with_timeout"]
