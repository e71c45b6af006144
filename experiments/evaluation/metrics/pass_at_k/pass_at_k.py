"""`evaluate` metric module: unbiased pass@k of candidate programs, executed in the passk sandbox.

A drop-in for the hub's `code_eval` (which cannot be fetched offline and runs candidates with `exec`):

    import evaluate
    pass_at_k = evaluate.load("experiments/evaluation/metrics/pass_at_k")          # a local path: no hub access
    pass_at_k.compute(predictions=[["def add(a, b):\\n    return a + b\\n", ...]],
                      references=["def check(candidate):\\n    assert candidate(1, 2) == 3\\n"],
                      entry_point=["add"], k=[1, 2])
    # -> {"pass@1": 0.5, "pass@2": 1.0}

`evaluate` copies this file into its modules cache and checks the top-level imports, so the module imports
only numpy, datasets and evaluate at load time; `sandbox` (the passk package) is imported inside `_compute`
and must be importable there (passk installed, or the repository root on sys.path).

The estimator duplicates `experiments.evaluation.stats.pass_at_k` on purpose, so this file stands alone;
tests/evaluation/test_metric_module.py checks that the two agree.
"""

import datasets
import evaluate
import numpy as np

_CITATION = """\
@article{chen2021codex,
  title={Evaluating Large Language Models Trained on Code},
  author={Mark Chen and Jerry Tworek and Heewoo Jun and Qiming Yuan and others},
  journal={arXiv preprint arXiv:2107.03374},
  year={2021}
}
"""

_DESCRIPTION = """\
Unbiased pass@k (Chen et al. 2021): with n candidates per problem of which c pass the tests,
pass@k = 1 - C(n-c, k) / C(n, k), averaged over problems. Candidates run in the passk sandbox
(separate processes with time, memory and output limits), never in this interpreter.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list (one per problem) of lists of candidate programs (full Python source).
    references: list (one per problem) of test code: HumanEval-style `def check(candidate): ...` or plain asserts.
    k: list of k values (default [1, 10]); a k larger than some problem's number of candidates is skipped.
    entry_point: the function under test, one name per problem or one name for all (needed for `check(candidate)`).
    timeout: seconds per candidate (default 3.0).
    memory_mb: address-space cap per candidate in MiB (default 1024).
    num_workers: sandbox worker processes (default: the sandbox's choice).
    trusted_code: optional, one string per problem (e.g. the HumanEval prompt): run on the sandbox's trusted side
        into the tests' namespace, so the tests call its helpers (HumanEval/32's `poly`), never a candidate's
        redefinition of them.
Returns:
    dict: "pass@k" -> float for each computable k.
Examples:
    >>> m = evaluate.load("experiments/evaluation/metrics/pass_at_k")
    >>> m.compute(predictions=[["def f():\\n    return 1\\n"]], references=["assert f() == 1"],
    ...           entry_point="f", k=[1])
    {'pass@1': 1.0}
"""


def _estimate(n: int, c: int, k: int) -> float:
    # 1 - C(n-c, k)/C(n, k) as a running product: no huge binomials.
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class PassAtK(evaluate.Metric):
    """Unbiased pass@k with sandboxed execution."""

    def _info(self):
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Value("string"),
                }
            ),
            reference_urls=["https://arxiv.org/abs/2107.03374"],
        )

    def _compute(
        self,
        predictions,
        references,
        k=(1, 10),
        entry_point=None,
        timeout=3.0,
        memory_mb=1024,
        num_workers=None,
        trusted_code=None,
    ):
        import sandbox  # lazy: evaluate checks only top-level imports when it loads this file

        if isinstance(entry_point, str) or entry_point is None:
            entry_points = [entry_point] * len(references)
        else:
            entry_points = list(entry_point)
            if len(entry_points) != len(references):
                raise ValueError(f"{len(entry_points)} entry points for {len(references)} problems")
        ks = [k] if isinstance(k, int) else list(k)
        trusted = [None] * len(references) if trusted_code is None else list(trusted_code)
        if len(trusted) != len(references):
            raise ValueError(f"{len(trusted)} trusted_code entries for {len(references)} problems")

        tasks, owner = [], []
        for i, (candidates, test) in enumerate(zip(predictions, references)):
            for program in candidates:
                tasks.append(
                    {
                        "program": program,
                        "tests": test,
                        "entry_point": entry_points[i],
                        "trusted_code": trusted[i],
                    }
                )
                owner.append(i)
        kwargs = {"timeout": float(timeout), "memory_mb": int(memory_mb)}
        if num_workers is not None:
            kwargs["n_workers"] = int(num_workers)
        results = sandbox.get_sandbox(**kwargs).run_batch(tasks) if tasks else []

        total = np.array([len(c) for c in predictions], dtype=int)
        correct = np.zeros(len(predictions), dtype=int)
        for i, result in zip(owner, results):
            correct[i] += bool(result.passed)
        out = {}
        for kk in ks:
            if total.size and (total >= kk).all() and kk >= 1:
                out[f"pass@{kk}"] = float(
                    np.mean([_estimate(int(n), int(c), kk) for n, c in zip(total, correct)])
                )
        return out
