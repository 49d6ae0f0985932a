"""benchmarks/defence_cost.py's replay share (issue 45's measure), read from an evalset output folder
written the way `cudaforge evalset --out` writes it (results/<pair>.json, each an EvalResult's dict)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import defence_cost
from engine.eval.result import EvalResult


def _write(out: Path, name: str, result: EvalResult) -> None:
    (out / "results").mkdir(parents=True, exist_ok=True)
    (out / "results" / f"{name}.json").write_text(json.dumps(result.to_dict()))


def test_the_replay_share_is_over_the_correct_pairs_timing_stages_with_its_parts_medians(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    for name, replay_s, time_s, probe_ms in (("a", 0.01, 0.5, 4.0), ("b", 0.03, 1.5, 8.0)):
        result = EvalResult(status="correct", durations={"defence_replay": replay_s, "time": time_s})
        result.settings["replay"] = {"parts_ms": {"probe": probe_ms, "samples": 1.0}}
        _write(tmp_path, name, result)
    _write(tmp_path, "refused", EvalResult(status="rejected", durations={"defence_replay": 9.0, "time": 1.0}))
    assert defence_cost.main([str(tmp_path)]) == 0
    rows = [defence_cost.row(tmp_path, name) for name in ("a", "b", "refused")]
    share = defence_cost.replay_share([r for r in rows if r])
    assert share is not None and share["pairs"] == 2  # the refused pair's timing is not the measure
    assert abs(share["share"] - 0.04 / 2.0) < 1e-12
    assert share["part_medians_ms"] == {"probe": 6.0, "samples": 1.0}
    assert "over 2 correct pairs, 2.00%" in capsys.readouterr().out
    assert defence_cost.replay_share([r for r in rows if r and r["status"] != "correct"]) is None


def test_each_timed_pairs_gap_beyond_the_reference_is_reported_against_its_allowance(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from engine.eval.result import Timing, TimingStats

    def stats(event_ms: float, gap_ms: float | None) -> TimingStats:
        stats = TimingStats.from_samples([event_ms])
        stats.gap_median_ms = gap_ms
        return stats

    for name, gap, reference_gap in (("a", 0.030, 0.010), ("b", 0.005, -0.002)):
        timing = Timing(method="cuda-events", candidate=stats(0.2, gap), reference=stats(0.4, reference_gap))
        _write(tmp_path, name, EvalResult(status="correct", timing=timing))
    _write(tmp_path, "older", EvalResult(status="correct", timing=Timing("cuda-events", stats(1.0, None), stats(1.0, None))))
    assert defence_cost.main([str(tmp_path)]) == 0
    rows = {name: defence_cost.row(tmp_path, name) for name in ("a", "b", "older")}
    assert abs(rows["a"]["gap_excess_ms"] - 0.020) < 1e-12 and abs(rows["b"]["gap_excess_ms"] - 0.005) < 1e-12
    assert abs(rows["a"]["gap_allowance_ms"] - 0.2) < 1e-12  # 0.1 ms and half the candidate's 0.2 ms
    assert rows["older"]["gap_excess_ms"] is None
    out = capsys.readouterr().out
    assert "2 timed pairs" in out and "+0.0050 to +0.0200 ms" in out and "least room left under the allowance 0.1800 ms" in out
