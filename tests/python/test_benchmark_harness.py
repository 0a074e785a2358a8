"""benchmarks/harness: the order of interleaved timing, its medians, a killed session's resume from its per-cell
JSON, and markdown tables; fast, no real models."""
import json
import os
import sys
import time

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "benchmarks"))

from harness import (Machine, Session, Timeout, Timing, compare, cosine, first, git_commit,  # noqa: E402
                     interleaved_medians, markdown_table, page_header, publish, time_interleaved, time_limit,
                     with_timeout, write_json)


def test_rounds_call_every_callable_in_turn_after_its_warmup():
    order = []
    calls = {key: (lambda key=key: order.append(key)) for key in "abc"}
    timings = time_interleaved(calls, rounds=3, warmup=2)
    assert order == list("aabbcc") + list("abc") * 3
    assert {key: len(timing.samples_ms) for key, timing in timings.items()} == {"a": 3, "b": 3, "c": 3}


def test_rounds_go_on_until_min_seconds():
    count = []
    time_interleaved({"a": lambda: count.append(1)}, rounds=1, min_seconds=0.05, warmup=0)
    assert len(count) > 1


def test_warmup_goes_on_for_its_seconds_after_its_count():
    calls = []
    time_interleaved({"a": lambda: calls.append(1)}, rounds=0, warmup=1, warmup_s=0.05)
    assert len(calls) > 1
    calls.clear()
    time_interleaved({"a": lambda: calls.append(1)}, rounds=2, warmup=3)
    assert len(calls) == 5


def test_calls_run_without_grad():
    grad = []
    time_interleaved({"a": lambda: grad.append(torch.is_grad_enabled())}, rounds=1, warmup=0)
    assert grad == [False]


def test_median_and_min():
    assert Timing([5.0, 1.0, 3.0]).median_ms == 3.0
    assert Timing([4.0, 1.0, 3.0, 2.0]).median_ms == 2.5
    assert Timing([4.0, 1.0, 3.0]).min_ms == 1.0


def test_interleaved_medians_passes_the_arguments():
    seen = []
    medians = interleaved_medians({"f": lambda x, y: seen.append((x, y))}, (1, 2), "cpu", repeats=3)
    assert seen == [(1, 2)] * 5  # two warm-up calls, three timed
    assert list(medians) == ["f"] and medians["f"] >= 0


class Killed(Exception):
    pass


def test_a_killed_session_resumes_without_measuring_finished_cells_again(tmp_path):
    measured = []

    def measure(key):
        def run():
            if key == "b" and "killed" not in measured:
                measured.append("killed")
                raise Killed  # the session dies in the middle of cell b
            measured.append(key)
            return {"key": key, "ms": [1.5, 2.5]}
        return run

    session = Session(str(tmp_path))
    with pytest.raises(Killed):
        for key in "abc":
            session.run(key, measure(key))
    assert sorted(os.listdir(tmp_path)) == ["a.json"]  # no file for the cell it died in
    resumed = Session(str(tmp_path))
    results = [resumed.run(key, measure(key)) for key in "abc"]
    assert measured == ["a", "killed", "b", "c"]
    assert results == [{"key": key, "ms": [1.5, 2.5]} for key in "abc"]
    with open(tmp_path / "c.json") as f:
        assert json.load(f) == {"key": "c", "ms": [1.5, 2.5]}


def test_no_cell_starts_after_the_deadline(tmp_path):
    session = Session(str(tmp_path), deadline_s=0)
    Session(str(tmp_path)).run("done", lambda: 1)
    assert session.run("done", lambda: pytest.fail("finished cells are not measured")) == 1
    assert session.run("late", lambda: pytest.fail("no cell starts after the deadline")) is None
    assert session.missing == ["late"]


def test_cell_keys_name_files():
    with pytest.raises(ValueError, match="cell key"):
        Session(None).path("resnet50/batch 8")


def test_markdown_table():
    assert markdown_table(["model", "ms"], [["resnet50", f"{1.234:.1f}"], ["vit", "-"]]) == (
        "| model | ms |\n| --- | --- |\n| resnet50 | 1.2 |\n| vit | - |")
    with pytest.raises(ValueError, match="every row"):
        markdown_table(["model", "ms"], [["resnet50"]])


def test_page_header_says_what_ran_it():
    header = page_header(Machine("Some CPU", 2, ["avx512_bf16"]), "python benchmarks/x.py --quick", "2 threads")
    machine, command = header.split("\n")
    assert machine.startswith("Machine: Some CPU, 2 CPU cores (cpu_features: avx512_bf16); 2 threads; date ")
    assert f"torch {torch.__version__}." in machine
    assert command == "Command: `python benchmarks/x.py --quick`"


def test_publish_appends_or_writes_the_whole_page(tmp_path, capsys):
    page = tmp_path / "PAGE.md"
    publish("first", str(page))
    publish("second", str(page))
    assert page.read_text() == "\nfirst\nsecond"
    publish("whole", str(page), whole_page=True)  # a page written again after each part measured
    assert page.read_text() == "whole"
    assert capsys.readouterr().out.split() == ["first", "second", "whole"]


def test_cosine_of_first_outputs():
    a = torch.tensor([1.0, 2.0, 3.0])
    assert cosine((a, torch.zeros(3)), [a * 2]) == pytest.approx(1.0)
    assert first(((a,),)) is a


def test_dict_outputs_give_their_last_hidden_state_or_first_value():
    a, b = torch.ones(2), torch.zeros(2)
    assert first({"logits": b, "last_hidden_state": a}) is a
    assert first([{"logits": b}]) is b


def test_compare_gives_cosine_largest_error_and_finiteness():
    reference = torch.tensor([1.0, -2.0, 4.0])
    same = compare(reference, reference.clone())
    assert same == {"cosine": pytest.approx(1.0), "max_rel_error": 0.0, "finite": True}
    off = compare(reference, torch.tensor([1.0, -2.0, 3.0]))
    assert off["max_rel_error"] == pytest.approx(0.25) and off["cosine"] < 1.0
    assert compare(reference, torch.tensor([1.0, float("inf"), 4.0]))["finite"] is False
    with pytest.raises(ValueError, match="shape"):
        compare(reference, torch.ones(2))


def test_a_call_past_its_timeout_is_stopped():
    with pytest.raises(Timeout, match="after 1 s"):
        with_timeout(1, lambda: time.sleep(10))
    assert with_timeout(None, lambda: 7) == 7
    with pytest.raises(Timeout):
        with time_limit(0.5):  # under a second counts as one
            time.sleep(10)
    with time_limit(0):  # no limit
        pass


def test_json_is_written_whole(tmp_path):
    path = str(tmp_path / "sub" / "run.json")
    write_json(path, {"rows": {"a": 1}})
    write_json(path, {"rows": {"a": 2}})
    with open(path) as f:
        assert json.load(f) == {"rows": {"a": 2}}
    assert sorted(os.listdir(tmp_path / "sub")) == ["run.json"]


def test_git_commit_outside_a_checkout_is_none(tmp_path):
    assert git_commit(str(tmp_path)) is None


def test_the_page_says_which_cells_came_from_earlier_runs_and_which_are_missing(tmp_path):
    Session(str(tmp_path)).run("earlier", lambda: 1)
    session = Session(str(tmp_path), deadline_s=0)
    assert session.page_note() == ""
    session.run("earlier", lambda: 2)
    session.run("late", lambda: 3)
    assert session.page_note() == ("Measured by an earlier run of this session (its cells folder): earlier.\n"
                                   "Not measured (the session's deadline came first): late.")
