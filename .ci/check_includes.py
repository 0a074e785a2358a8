"""check_includes.py BUILD_DIR TARGET: every source of TARGET compiled with a precompiled header includes, itself
(directly or through its own includes), each header that precompiled header holds.

A precompiled header is given to every source of a target, so a source may compile with it only because of a header
it never includes; every build without that header (another compiler, another build system, a pip install of an
older setup.py) then fails on it. So the rule is checked on the build's own commands (BUILD_DIR/compile_commands.json):
each command that force-includes TARGET's cmake_pch.hxx is run again without it, preprocessing only (`-M`, about a
second a source), and the headers the source reaches are compared with those the precompiled header names.
Exit status 0 when every source passes, 1 with one line per source and missing header otherwise.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def precompiled_headers(pch_file):
    """The headers a CMake cmake_pch.hxx includes, as written (<torch/csrc/jit/ir/ir.h> -> torch/csrc/jit/ir/ir.h)."""
    with open(pch_file, encoding="utf-8") as lines:
        return [match.group(1) for line in lines if (match := re.match(r'#include [<"](.+)[>"]', line.strip()))]


def without_precompiled_header(arguments):
    """A compile command's arguments with the forced include, the output and -c taken out (for -M)."""
    kept, skip = [], False
    for argument in arguments:
        if skip:
            skip = False
        elif argument in ("-include", "-o"):
            skip = True
        elif argument not in ("-c", "-Winvalid-pch"):
            kept.append(argument)
    return kept


def reached_headers(entry):
    """The files the source reaches through its own includes (the dependency list of `-M`, one path per item)."""
    arguments = without_precompiled_header(shlex.split(entry["command"]))
    done = subprocess.run(arguments + ["-M"], capture_output=True, text=True, cwd=entry["directory"])
    if done.returncode != 0:
        raise SystemExit(f"preprocessing {entry['file']} failed:\n{done.stderr}")
    return done.stdout.replace("\\\n", " ").split()


def missing_headers(entry, headers):
    reached = reached_headers(entry)
    return [header for header in headers if not any(path.endswith("/" + header) for path in reached)]


def main(build_dir, target):
    pch_file = os.path.join(build_dir, "CMakeFiles", f"{target}.dir", "cmake_pch.hxx")
    if not os.path.isfile(pch_file):
        raise SystemExit(f"{pch_file} does not exist: {target} has no precompiled header in {build_dir}")
    headers = precompiled_headers(pch_file)
    with open(os.path.join(build_dir, "compile_commands.json"), encoding="utf-8") as commands:
        entries = [entry for entry in json.load(commands)
                   if pch_file in entry["command"] and not entry["file"].endswith("cmake_pch.hxx.cxx")]
    if not entries:
        raise SystemExit(f"no compile command of {build_dir} uses {pch_file}")
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        missing = list(pool.map(lambda entry: missing_headers(entry, headers), entries))
    problems = [(entry["file"], header) for entry, lacking in zip(entries, missing) for header in lacking]
    for source, header in problems:
        print(f"{source}: does not include <{header}>, which the precompiled header of {target} gives it; "
              f"include what the source uses, or take <{header}> out of target_precompile_headers")
    print(f"{len(entries)} sources of {target} checked against its precompiled header ({', '.join(headers)}): "
          f"{len(problems)} missing includes")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: check_includes.py BUILD_DIR TARGET")
    sys.exit(main(sys.argv[1], sys.argv[2]))
