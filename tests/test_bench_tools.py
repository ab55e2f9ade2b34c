"""The bench's by-hand tools (python -m bench.burst, python -m bench.profile): what they compute
from their raw input. `make test` runs the bench itself only as a smoke run."""

from __future__ import annotations

from pathlib import Path

from bench.burst import kth_answers
from bench.profile import summarize


def test_the_kth_answer_is_averaged_over_the_bursts_of_every_repetition() -> None:
    # two repetitions of two bursts of three calls; each burst's calls in the order they were sent
    repetitions = [[0.003, 0.001, 0.002, 0.010, 0.030, 0.020], [0.002, 0.004, 0.006, 0.001, 0.002, 0.003]]
    assert [round(x, 3) for x in kth_answers(repetitions, rounds=2)] == [3.5, 7.0, 10.5]


def test_the_profile_counts_calls_being_served_inclusive_and_self(tmp_path: Path) -> None:
    raw = tmp_path / "py-spy.raw"
    raw.write_text(
        "\n".join(
            [
                # a handler: 3 samples in the state, 1 in logging
                "_worker (thread.py:1);NodePrepareResources (server.py:2);prepare (state.py:3) 3",
                "_worker (thread.py:1);NodePrepareResources (server.py:2);info (__init__.py:4) 1",
                # an idle worker and the server's loop waiting: not counted
                "_worker (thread.py:1);get (queue.py:5) 7",
                "serve_forever (server.py:6);poll (server.py:7) 9",
                "not a sample line",
            ]
        )
        + "\n"
    )
    text = summarize(raw)
    assert text.startswith("4 samples in calls being served")
    inclusive, own = text.split("self %")
    assert "100.0  NodePrepareResources server.py" in inclusive
    assert "75.0  prepare state.py" in inclusive and "25.0  info __init__.py" in inclusive
    assert "75.0  prepare state.py" in own and "NodePrepareResources" not in own
    assert "get queue.py" not in text and "poll server.py" not in text
