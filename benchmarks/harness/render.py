"""Results as markdown: tables, the lines that head a page (machine, date, torch version, command), and publishing
(printed, and appended to a page or written as the page when one is named)."""
import datetime
import os
import shlex
import sys
from typing import Optional, Sequence

import torch

from .machine import Machine


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table; cells are written with str() (format numbers before)."""
    if any(len(row) != len(headers) for row in rows):
        raise ValueError(f"every row needs {len(headers)} cells, as many as the headers")
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def command_line(argv: Optional[Sequence[str]] = None) -> str:
    """How the running script was called, as a reader would retype it: `python benchmarks/<script>.py <args>`."""
    argv = sys.argv if argv is None else argv
    script = "benchmarks/" + os.path.basename(argv[0])
    return " ".join(["python", script] + [shlex.quote(a) for a in argv[1:]])


def machine_line(machine: Machine, *details: str) -> str:
    """`Machine: <name, cores, cpu_features>; <details>; date <today>; torch <version>.`"""
    parts = [machine.describe(), *details, f"date {datetime.date.today()}", f"torch {torch.__version__}"]
    return "Machine: " + "; ".join(parts) + "."


def page_header(machine: Machine, command: str, *details: str) -> str:
    """The two lines that say what produced the results under them."""
    return machine_line(machine, *details) + f"\nCommand: `{command}`"


def publish(text: str, out: Optional[str], whole_page: bool = False) -> None:
    """Prints the results and writes them to the markdown file `out` (if given): appended to the page, or, with
    whole_page, as the page (a script that writes its page whole, again after each part measured)."""
    print(text)
    if out:
        with open(out, "w" if whole_page else "a") as f:
            f.write(text if whole_page else "\n" + text)
