"""A benchmark session that survives being stopped: its cells (one model at one setting, say) each write their
result as a JSON file the moment they finish, and a rerun with the same folder takes those instead of measuring
again. A deadline stops the session between cells, so a machine lent for a fixed time ends with whole cells written.

    session = Session(folder, deadline_s=3600)
    for case in cases:
        result = session.run(key_of(case), lambda: asdict(measure(case)))   # None: the deadline came first
    session.missing, session.resumed  # keys of the cells not measured, and of those taken from an earlier run

A cell's result is whatever JSON-serialisable value `measure` returns (a dataclasses.asdict of the script's row
record); the script rebuilds its record from it. Keys become file names: letters, digits, '.', '-', '_' only.
"""
import json
import os
import re
import time
from typing import Callable, List, Optional

_KEY = re.compile(r"[A-Za-z0-9._-]+")


def write_json(path: str, data: object) -> None:
    """`data` as the JSON file `path`, written whole and then renamed, so that a process killed while writing leaves
    the file as it was (the earlier cells, to resume from) and at most a `path`.partial beside it."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    partial = path + ".partial"
    with open(partial, "w") as f:
        json.dump(data, f, indent=1, default=str)
    os.replace(partial, path)


class Session:
    def __init__(self, folder: Optional[str], deadline_s: Optional[float] = None):
        """folder: where cells are written (None: nowhere, nothing resumes); deadline_s: seconds from now after
        which no cell starts (None: no deadline)."""
        self.folder = folder
        self.deadline = None if deadline_s is None else time.monotonic() + deadline_s
        self.missing: List[str] = []  # not started: the deadline came first
        self.resumed: List[str] = []  # taken from the folder: measured by an earlier run
        if folder:
            os.makedirs(folder, exist_ok=True)

    def path(self, key: str) -> str:
        if not _KEY.fullmatch(key):
            raise ValueError(f"cell key {key!r}: letters, digits, '.', '-', '_' only (it names a file)")
        return os.path.join(self.folder, key + ".json")

    def finished(self, key: str):
        """The stored result of cell `key`, or None when it has not finished in this folder."""
        if not self.folder or not os.path.exists(self.path(key)):
            return None
        with open(self.path(key)) as f:
            return json.load(f)

    def run(self, key: str, measure: Callable[[], object]):
        """The result of cell `key`: stored (the key is then in `resumed`), or measured now and stored; None when the
        deadline has passed (the key is then in `missing`)."""
        stored = self.finished(key)
        if stored is not None:
            self.resumed.append(key)
            print(f"cell {key}: finished in an earlier run, taken from {self.path(key)}", flush=True)
            return stored
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.missing.append(key)
            print(f"cell {key}: not started, the session's deadline has passed", flush=True)
            return None
        result = measure()
        if self.folder:
            write_json(self.path(key), result)  # a session killed while writing leaves no half cell to resume from
        return result

    def page_note(self) -> str:
        """The lines a page needs when its cells are not all from this run ('' when they are)."""
        lines = []
        if self.resumed:
            lines.append(f"Measured by an earlier run of this session (its cells folder): {', '.join(self.resumed)}.")
        if self.missing:
            lines.append(f"Not measured (the session's deadline came first): {', '.join(self.missing)}.")
        return "\n".join(lines)
