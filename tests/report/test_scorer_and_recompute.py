"""Every record names its scorer, a report refuses rows scored by different ones, a null verdict carries its minimum
detectable effect, p-values at the bootstrap's floor read as bounds, and a committed report is rebuilt from its
committed records with the same tables (issue 52)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from experiments.errors import DataError
from experiments.evaluation.scorer import check_same_scorer, scorer_stamp, scorer_text
from experiments.evaluation.stats import EvalResult, ProblemResult, summarize
from experiments.report import CURVES, build_report, render_markdown
from experiments.report.analysis import minimum_detectable_effect, p_floor
from experiments.report.markdown import _fmt_mde, format_p_value
from rewards.extraction import EXTRACTION_VERSION
from sandbox import SANDBOX_VERSION

ROOT = Path(__file__).resolve().parents[2]
SMOLLM2 = ROOT / "benchmarks" / "results" / "smollm2"
SIDE_BY_SIDE_TUNED = ROOT / "benchmarks" / "results" / "side_by_side_tuned" / "report"
TASKS = [f"t{i}" for i in range(20)]


def _eval(correct: list[int], scorer: dict | None) -> dict:
    problems = [
        ProblemResult(t, 4, c, [1.0] * c + [0.0] * (4 - c), c > 1, "x", 0) for t, c in zip(TASKS, correct)
    ]
    passk, greedy, avg = summarize(problems, ks=(1, 4))
    settings = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 16, "greedy": True, "seed": 0}
    return EvalResult(
        passk,
        greedy,
        avg,
        len(problems),
        4,
        [1, 4],
        100,
        1.0,
        1.0,
        problems,
        settings=settings,
        scorer=scorer,
    ).to_dict()


def _run(path: Path, method: str, scorer: dict | None, correct: list[int]) -> Path:
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"method": method, "seed": 0, "model": "tiny"}))
    (path / "eval_before.json").write_text(json.dumps(_eval([1] * len(TASKS), scorer)))
    (path / "eval_after.json").write_text(json.dumps(_eval(correct, scorer)))
    return path


def test_the_stamp_names_the_extraction_rules_and_the_sandbox_and_an_eval_record_carries_it() -> None:
    stamp = scorer_stamp()
    assert (stamp["extraction"], stamp["sandbox"]) == (EXTRACTION_VERSION, SANDBOX_VERSION)
    assert stamp["commit"] is None or len(stamp["commit"].removesuffix("-dirty")) == 40
    assert _eval([2] * len(TASKS), stamp)["scorer"] == stamp
    assert "scorer" not in _eval([2] * len(TASKS), None)  # an unstamped record stays as it was
    assert scorer_text({"extraction": 4, "sandbox": 3, "commit": "0123456789abcdef"}) == (
        "extraction v4, sandbox v3 (commit 0123456789ab)"
    )


def test_a_report_refuses_rows_scored_by_different_versions_in_one_line(tmp_path: Path) -> None:
    old = {"extraction": EXTRACTION_VERSION - 1, "sandbox": SANDBOX_VERSION, "commit": None}
    dirs = [_run(tmp_path / "a", "a", scorer_stamp(), [3] * 20), _run(tmp_path / "b", "b", old, [2] * 20)]
    with pytest.raises(DataError) as err:  # one of USER_ERRORS: passk prints it as one line, no traceback
        build_report(dirs, tmp_path)
    message = str(err.value)
    assert "\n" not in message and message.startswith("report: these rows were scored by different scorers")
    assert (
        f"extraction v{EXTRACTION_VERSION - 1}, sandbox v{SANDBOX_VERSION}: b eval_before, b eval_after"
        in message
    )
    assert message.endswith("evaluate them again with one scorer (passk eval) or report them apart")


def test_a_report_refuses_a_stamped_row_beside_an_unstamped_one_unless_the_run_declares_its_scorer(
    tmp_path: Path,
) -> None:
    """A record without a stamp may have been scored by anything; a run folder can declare it in scorer.json."""
    stamp = scorer_stamp()
    dirs = [_run(tmp_path / "a", "a", stamp, [3] * 20), _run(tmp_path / "b", "b", None, [2] * 20)]
    with pytest.raises(ValueError, match="not recorded: b eval_before, b eval_after"):
        build_report(dirs, tmp_path)
    (dirs[1] / "scorer.json").write_text(
        json.dumps({**stamp, "commit": None, "declared": "known from the log"})
    )
    report = build_report(dirs, tmp_path)
    assert report["setup"]["scorer"]["text"] == scorer_text({**stamp, "commit": None})
    assert report["setup"]["scorer"]["declared"] is True
    assert f"- Scored by: extraction v{EXTRACTION_VERSION}, sandbox v{SANDBOX_VERSION}, every row" in (
        render_markdown(report)
    )


def test_rows_that_all_lack_a_stamp_are_reported_and_the_report_says_the_scorer_is_not_recorded(
    tmp_path: Path,
) -> None:
    dirs = [_run(tmp_path / "a", "a", None, [3] * 20), _run(tmp_path / "b", "b", None, [2] * 20)]
    check_same_scorer({"a": None, "b": None})
    text = render_markdown(build_report(dirs, tmp_path))
    assert "- Scored by: not recorded in these records" in text


def test_the_minimum_detectable_effect_is_the_power_calculation_on_the_replicates_spread() -> None:
    """(z_(1 - 0.05/2m) + z_0.8) x sd: 1.96 + 0.8416 for one test, 2.394 + 0.8416 for three."""
    reps = np.random.default_rng(0).normal(0.0, 0.02, 200_000)
    assert minimum_detectable_effect(reps, 1) == pytest.approx((1.959964 + 0.841621) * 0.02, rel=5e-3)
    assert minimum_detectable_effect(reps, 3) == pytest.approx((2.393980 + 0.841621) * 0.02, rel=5e-3)
    # No problem differs: the replicates do not vary, and say nothing about power (not "0 pp").
    assert minimum_detectable_effect(np.zeros(1000), 3) is None
    assert (
        _fmt_mde("pass@1", None) == "; smallest effect detectable: not estimable (no problem's value differs)"
    )
    assert _fmt_mde("pass@1", 0.0842) == "; smallest effect detectable (80% power): 8.4 pp"


def test_p_values_at_the_bootstraps_floor_print_as_bounds() -> None:
    floor = p_floor(10_000)
    assert floor == pytest.approx(2 / 10_001)
    assert format_p_value(floor, floor) == "< 0.0002"
    assert (
        format_p_value(12 * floor, floor, raw=floor) == "< 0.0024"
    )  # Holm's adjustment of a floor p is a bound too
    assert format_p_value(0.0312, floor) == "0.0312"
    assert format_p_value(0.0312, floor, raw=0.0104) == "0.0312"


def test_the_committed_smollm2_report_is_rebuilt_from_its_committed_records_with_the_same_tables() -> None:
    """report.md and report.json of benchmarks/results/smollm2 come back from records/ alone (the plots' file names
    are taken from the committed report.json: this test draws none)."""
    committed = json.loads((SMOLLM2 / "report.json").read_text())
    runs = [SMOLLM2 / r["run"] for r in committed["runs"]]
    assert [r["run"] for r in committed["runs"]] == [
        "records/grpo",
        "records/reinforce_rloo",
        "records/reinforce_kl",
    ]
    report = build_report(runs, SMOLLM2)
    drawn = [
        "pass_at_k",
        "pass_at_k_curve",
        "comparisons",
        *(stem for _, stem, _, _ in CURVES),
    ]  # write_report's order
    report["plots"] = {stem: committed["plots"][stem] for stem in drawn if stem in committed["plots"]}
    assert json.loads(json.dumps(report, sort_keys=True)) == committed
    assert render_markdown(report) == (SMOLLM2 / "report.md").read_text()
    assert "?" not in render_markdown(report).split("## What was trained")[1].split("\n\n")[0]


def _bench_learning():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "benchmarks" / "bench_learning.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_bench_learning_run_gives_the_report_every_setting_it_prints_and_its_counts_per_problem(
    tmp_path: Path,
) -> None:
    """bench_learning's run.json carries the config the report's "What was trained" reads (the side-by-side study
    printed "?" for the task, style, learning rate, length and temperature), and learning.json the per-problem
    counts a comparison is recomputed from."""
    from types import SimpleNamespace

    from experiments.learnable.recipe import HeldoutScore

    bench = _bench_learning()
    args = SimpleNamespace(
        learning_rate=3e-4,
        lr_scheduler_type=SimpleNamespace(value="constant_with_warmup"),
        max_completion_length=16,
        temperature=1.0,
        num_generations=8,
    )
    config = bench._run_config(args, 0, len(TASKS))
    assert config["lr_scheduler_type"] == "constant_with_warmup" and config["dataset"] == "learnable"
    dirs = [_run(tmp_path / m, m, scorer_stamp(), [c] * len(TASKS)) for m, c in (("a", 3), ("b", 2))]
    for d in dirs:
        meta = json.loads((d / "run.json").read_text())
        meta["config"] = config
        meta["model_parameters"] = 1234  # as bench_learning's run.json records it
        meta["budget"] = {
            "fresh_prompts": 8,
            "fresh_completions": 64,
            "optimizer_steps": 1,
            "num_generations": 8,
        }
        (d / "run.json").write_text(json.dumps(meta))
    setup = render_markdown(build_report(dirs, tmp_path)).split("## What was trained")[1].split("\n\n")[1]
    assert "?" not in setup and "learning rate 0.0003 (constant_with_warmup)" in setup
    after = _eval([3] * len(TASKS), scorer_stamp())
    score = HeldoutScore(60, 80, 20, 20, result=after)
    counts = bench._score_dict(score)
    assert counts["per_problem"]["t0"] == [4, 3, 1] and len(counts["per_problem"]) == len(TASKS)
    assert counts["scorer"] == scorer_stamp()


@pytest.mark.parametrize(
    "folder",
    [SMOLLM2, SIDE_BY_SIDE_TUNED],
    ids=["smollm2", "side_by_side_tuned"],
)
def test_a_committed_report_is_rebuilt_from_its_counts_json_alone_with_the_same_tables(
    tmp_path: Path, folder: Path
) -> None:
    """counts.json (written by write_report beside report.md) holds each run's per-problem counts: the run
    directories it gives back yield every table of the committed report.json but the training curves."""
    from experiments.report import runs_from_counts

    committed = json.loads((folder / "report.json").read_text())
    report = json.loads(
        json.dumps(build_report(runs_from_counts(folder / "counts.json", tmp_path), tmp_path))
    )
    for key in ("verdict", "setup", "comparisons", "coverage", "from_start", "headline_k", "bootstrap"):
        assert report[key] == committed[key], key
    for got, want in zip(report["methods"], committed["methods"], strict=True):
        assert {k: v for k, v in got.items() if k != "runs"} == {k: v for k, v in want.items() if k != "runs"}
    assert report["curves"] == {}  # trainer_state.json is not in counts.json


def test_write_report_writes_counts_json_that_gives_back_the_same_report(tmp_path: Path) -> None:
    from experiments.report import runs_from_counts, write_report

    dirs = [_run(tmp_path / "runs" / m, m, scorer_stamp(), [c] * len(TASKS)) for m, c in (("a", 4), ("b", 1))]
    write_report(dirs, tmp_path / "report")
    written = json.loads((tmp_path / "report" / "report.json").read_text())
    again = build_report(runs_from_counts(tmp_path / "report" / "counts.json", tmp_path / "back"), tmp_path)
    assert json.loads(json.dumps(again))["comparisons"] == written["comparisons"]
    assert json.loads(json.dumps(again))["verdict"] == written["verdict"]


def test_rescoring_stored_first_answers_names_each_verdict_the_scorer_reads_otherwise(tmp_path: Path) -> None:
    """benchmarks/rescore_records.py rebuilds a run's problems from its run.json and rescores each stored first
    answer: a record whose recorded verdict is flipped by hand comes back as one changed verdict, named."""
    import importlib.util
    import shutil

    spec = importlib.util.spec_from_file_location(
        "rescore_records", ROOT / "benchmarks" / "rescore_records.py"
    )
    rescore = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rescore)
    run = tmp_path / "reinforce_kl"
    shutil.copytree(SMOLLM2 / "records" / "reinforce_kl", run)
    (run / "eval_before.json").unlink()
    after = json.loads((run / "eval_after.json").read_text())
    flipped = after["problems"][0]
    flipped["rewards"][0] = 0.0 if flipped["rewards"][0] >= 1.0 else 1.0
    (run / "eval_after.json").write_text(json.dumps(after))
    (entry,) = rescore.rescore_run(run, tmp_path)
    assert entry["phase"] == "after" and entry["rescored_problems"] == 100 and entry["not_rescored"] == []
    assert entry["rescored_with"] == scorer_stamp()
    assert entry["recorded_scorer"]["extraction"] == 1  # the folder's scorer.json
    # Only the flipped one: today's scorer reads the other 99 as recorded (the SmolLM2 README's claim; a scorer
    # that changes one of them fails here, and the README's rescoring is then to be rerun).
    assert [c["task_id"] for c in entry["changed"]] == [flipped["task_id"]]
