"""Mutation testing of one module or folder with its mapped tests (mutmut), and its score.

    python tools/mutation.py uopcli/core/simplify          # make mutation TARGET=uopcli/core/simplify
    python tools/mutation.py uopcli/core/gradient.py --max-children 2
    python tools/mutation.py uopcli/core/simplify/exact.py uopcli/core/simplify/fold.py   # several, one run
    python tools/mutation.py uopcli/core/forward.py --functions _tangents_tagged,compute_jvp --sample 0.5
    python tools/mutation.py --recheck out/mutation/uopcli_core_forward.py --current-tests  # survivors
        # against the tests written for them since the run (the mapped files, run whole)

mutmut copies the project into a `mutants/` directory and mutates it there, so the work is
done in a scratch copy of the tracked files (out/mutation/<target>/): the worktree is never
changed, and its tests can run meanwhile. Each mutant runs only the mapped tests that reach
the mutated function. At the end the score (killed / all that ran) and the surviving
mutants' names are printed; `mutmut show NAME` in the scratch directory prints a mutant's diff.
A run that gives no score (mutmut stopped: a mapped test failing in its clean run; or no mutant
has a result) ends with one line saying why and exit status 1, never with 0/0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FORWARD_TESTS = ["tests/test_forward.py", "tests/test_forward_cli.py", "tests/test_forward_torch.py",
                 "tests/test_forward_edges.py", "tests/test_forward_names.py"]

PRIMITIVES_TESTS = ["tests/test_primitives_mutants.py", "tests/test_builder_mutants.py", "tests/test_uop.py",
                    "tests/test_tinygrad_meaning.py", "tests/test_builder_definitions.py", "tests/test_builder_gaps.py",
                    "tests/test_builder_nan_order.py", "tests/test_inference_mutants.py"]

# target prefix -> the test files that check it (the first prefix that matches wins)
TESTS = [
    # the evaluators (numpy backend and the reference one): the tests that compare evaluated values
    # with numpy, torch or the reference evaluator (15 s whole; test_evaluate_mutants.py and
    # test_reference_mutants.py hold those written for the survivors of each); the ONNX files reach the backend too but cost
    # minutes and check the importer first
    ("uopcli/backends", ["tests/test_evaluate.py", "tests/test_evaluate_fastpaths.py",
                         "tests/test_evaluate_in_place.py", "tests/test_evaluate_mutants.py", "tests/test_strided.py",
                         "tests/test_reference.py", "tests/test_reference_mutants.py", "tests/test_accumulation.py",
                         "tests/test_onnx_float16_sums.py", "tests/test_compiled_program.py",
                         "tests/test_python_api_hardening.py"]),
    ("uopcli/core/simplify", ["tests/test_simplify.py", "tests/test_simplify_rows.py", "tests/test_simplify_walk.py",
                              "tests/test_simplify_differential.py", "tests/test_simplify_ulps.py"]),
    ("uopcli/core/gradient.py", ["tests/test_gradient.py", "tests/test_gradient_properties.py",
                                 "tests/test_gradient_higher_order.py",
                                 "tests/test_gradient_second_order_properties.py",
                                 "tests/test_gradient_rules_edges.py"]),
    # forward mode: its rule table and walk, the graph-level commands and the transpose check
    ("uopcli/core/forward.py", FORWARD_TESTS),
    # `check MODEL --against FILE`: the written derivative files (diff, jvp, hvp, jacobian, hessian)
    # and their refusals, in-process (test_file_check_mutants.py holds the tests written for the
    # survivors); 7 s whole
    ("uopcli/tools/file_check.py", ["tests/test_file_check_mutants.py", "tests/test_check_against_gradient.py",
                                    "tests/test_forward_check_file.py"]),
    # the finite-difference comparison that check --hvp, check --against and plain check share
    # (kinks named, noise told apart, `not checked`): their verdict files, check's kink sites
    # (test_check_mutants.py) and check --hvp's tests in test_forward.py; about 30 s whole
    ("uopcli/tools/forward_differences.py", ["tests/test_file_check_mutants.py", "tests/test_forward_check_verdicts.py",
                                             "tests/test_check_verdicts.py", "tests/test_check_mutants.py",
                                             "tests/test_forward_check_file.py", "tests/test_check_against_gradient.py",
                                             "tests/test_forward.py"]),
    ("uopcli/tools/forward", FORWARD_TESTS),
    # the classes a random integer index is drawn below (eval --random, check), and given ones are checked against
    ("uopcli/tools/index_range.py", ["tests/test_index_range.py", "tests/test_index_check.py"]),
    # the names differentiation gives what it adds, numbered where taken (diff, jvp, hvp, check)
    ("uopcli/tools/names.py", ["tests/test_forward_names.py", "tests/test_cli_library.py"]),
    # control flow (If, Scan, Loop unrolled): If through function bodies, Scan/Loop/LinearAttention's
    # own node cases in the conformance file (27 s whole; mutmut runs only the batches that reach them)
    ("uopcli/interop/onnx/control.py", ["tests/test_onnx_scan.py", "tests/test_onnx_functions.py",
                                        "tests/test_onnx_conformance.py"]),
    # RoiAlign and DeformConv (the layers file holds their cases beside the GridSample ones)
    ("uopcli/interop/onnx/ops_roi.py", ["tests/test_onnx_import_roi.py", "tests/test_onnx_import_layers.py"]),
    # ONNX's own node cases (test_onnx_conformance.py) reach every import row with the spec's values;
    # float64.py's forms are held to mpmath by test_onnx_float64_accuracy.py
    ("uopcli/interop/onnx", ["tests/test_onnx_bridge.py", "tests/test_onnx_export.py", "tests/test_onnx_export_ops.py",
                             "tests/test_onnx_cli_inputs.py",
                             "tests/test_onnx_export_timeouts.py",
                             "tests/test_onnx_import_ops.py", "tests/test_onnx_import_models.py",
                             "tests/test_onnx_edges.py", "tests/test_onnx_conformance.py",
                             "tests/test_onnx_import_families.py", "tests/test_onnx_import_layers.py",
                             "tests/test_onnx_import_layer_gradients.py", "tests/test_onnx_import_sequences.py",
                             "tests/test_onnx_import_versions.py", "tests/test_onnx_float64_accuracy.py",
                             "tests/test_onnx_bitcast.py", "tests/test_onnx_constant_inputs.py",
                             "tests/test_onnx_import_counted_shapes.py", "tests/test_onnx_torch_architectures.py",
                             "tests/test_onnx_fuzz.py", "tests/test_onnx_grad_fuzz.py",
                             "tests/test_onnx_signal.py", "tests/test_onnx_flex_attention.py"]),
    # the device tests' zoo models cost minutes; their division test (4 s) is the one that runs
    # a renderer without FDIV (backend.py's spelling of it), their sine tests (3 s) the ones that
    # run SIN on a renderer without SIN (backend.py's 2 pi reduction) and with it
    ("uopcli/interop/tinygrad", ["tests/test_tinygrad_bridge.py", "tests/test_tinygrad_meaning.py",
                                 "tests/test_tinygrad_export_rules.py", "tests/test_tinygrad_scopes.py",
                                 "tests/test_tinygrad_devices.py::test_division_without_fdiv_is_correctly_rounded",
                                 "tests/test_tinygrad_devices.py::test_float64_sine_keeps_its_digits",
                                 "tests/test_tinygrad_devices.py::test_division_on_a_device_without_float64_stays_in_its_dtype",
                                 "tests/test_tinygrad_devices.py::test_float32_sine_and_the_python_devices_are_tinygrads_own"]),
    # the gradient checker (check.py, check_numeric.py, check_float64.py): its verdicts, errors and
    # retries in-process (test_check_mutants.py holds the tests written for the survivors; the
    # subprocess tests run the installed uopgrad, not the mutant); 30 s whole
    ("uopcli/tools/check", ["tests/test_check_mutants.py", "tests/test_check_scale.py", "tests/test_cli_library.py",
                            "tests/test_uop.py", "tests/test_cli.py", "tests/test_reference.py"]),
    # the NaN tracer (eval --debug-nans, check's not-finite notes)
    ("uopcli/tools/nans.py", ["tests/test_nans_mutants.py", "tests/test_check_scale.py", "tests/test_cli_library.py"]),
    # shape and dtype inference of every op: the node builders' refusals and shapes, through UOp's
    # constructors and the builder (test_inference_mutants.py holds the tests written for the survivors)
    ("uopcli/core/inference.py", ["tests/test_inference_mutants.py", "tests/test_uop.py",
                                  "tests/test_builder_definitions.py", "tests/test_builder_gaps.py"]),
    # reading .uop files: every refusal's one line (file, node, op) and exact loads, both forms
    # (test_reader_mutants.py holds the tests written for the survivors)
    ("uopcli/formats/uop", ["tests/test_reader_mutants.py", "tests/test_fileformat.py",
                            "tests/test_fileformat_fuzz.py"]),
    # the tensor builder's composites (tinygrad's Tensor functions): the stored tinygrad values for
    # every case, numpy's definitions, and test_builder_mutants.py (numpy/torch float64 oracles,
    # order-sensitive losses and edge values, written for the survivors); 5 s whole
    ("uopcli/builder", ["tests/test_builder_mutants.py", "tests/test_tinygrad_meaning.py",
                        "tests/test_builder_definitions.py", "tests/test_builder_gaps.py"]),
    # eval --map in this process: the sum tree, sums and means over shards bit for bit, the
    # refusals, the per-shard outputs, the report (test_map_mutants.py holds the tests written for
    # the survivors; test_map.py's CLI cases run the installed uopgrad, not the mutant); 50 s whole
    ("uopcli/tools/map.py", ["tests/test_map_mutants.py", "tests/test_map.py"]),
    # the node itself: interning (make, make_shaped, _new, _leaf, _forget, _const_key, the sweep and
    # its sibling promotion) and the constructors (test_intern_mutants.py holds the tests written for
    # the survivors: nodes that differ are two nodes with their own values, before and after sweeps)
    ("uopcli/core/uop.py", ["tests/test_intern_mutants.py", "tests/test_uop.py"]),
    # the builder's primitives (operators and tinygrad's promotion, unary ops, casts, reductions,
    # movement) and promotion.py's pairing: the values of the nodes they make, evaluated, against
    # numpy/torch and tinygrad's stored cases (test_primitives_mutants.py holds the tests written
    # for the survivors); about 25 s whole
    ("uopcli/core/primitives.py", PRIMITIVES_TESTS),
    ("uopcli/core/promotion.py", PRIMITIVES_TESTS),
    ("uopcli/views/html", ["tests/test_html_viewer.py", "tests/test_html_groups.py"]),
]


def mapped_tests(target: str) -> list[str]:
    for prefix, tests in TESTS:
        if target.startswith(prefix) or prefix.startswith(target.rstrip("/")):
            return [t for t in tests if (ROOT / t.split("::")[0]).exists()]  # a file, or one test in it
    raise SystemExit(f"mutation: no tests are mapped to {target} (tools/mutation.py, TESTS)")


def copy_project(where: Path) -> Path:
    """The project's files (tracked, and new ones not ignored) copied to `where`, emptied
    first: the scratch copy mutation runs and tools/plants.py's replays work in."""
    if where.exists():
        shutil.rmtree(where)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.splitlines()
    for name in files:
        source = ROOT / name
        if source.is_file():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, where / name)
    return where


def scratch_copy(targets: list[str], tests: list[str]) -> Path:
    """The tracked files, copied to out/mutation/<first target>/, with mutmut's settings."""
    where = copy_project(ROOT / "out" / "mutation" / targets[0].strip("/").replace("/", "_"))
    only = [f"{t.rstrip('/')}/*" if (ROOT / t).is_dir() else t for t in targets]
    settings = {
        "source_paths": ["uopcli"], "only_mutate": only, "also_copy": ["samples", "schemas", "docs", "tools", "bench", "README.md"],
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": ["-p", "no:randomly", "-q", "-x", "--timeout=600"],
        # each mutant forked from a server that only collected the tests, not from the process that
        # ran them all: forked from that one, a mutant whose tests call torch waits forever on its
        # thread pool's lock (a futex, no CPU) until the wall limit, counted a timeout (2026-12-07,
        # core/primitives.py: 24 of the first 176 mutants, minutes each; 5 of them survivors)
        "process_isolation": "forkserver",
    }
    with open(where / "pyproject.toml", "a") as f:
        f.write("\n[tool.mutmut]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    return where


# the thread pools of torch and BLAS kept to one thread in mutmut's processes: one mutant at a
# time per core, and no pool's lock held across a fork
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def run_failure(returncode: int, output: str) -> str | None:
    """Why `mutmut run` stopped before its mutants, in one line, or None if it did not.

    mutmut exits 1 after printing its reason ("Failed to run clean test" when a mapped test
    fails on the unmutated code in the process that just collected the stats, whose module
    state, such as a test file's RNG, the first run left advanced); its results stay unset,
    which a score would count as 0/0."""
    if returncode == 0:
        return None
    lines = [x.strip() for x in output.replace("\r", "\n").splitlines() if x.strip()]
    failed = [x for x in lines if x.startswith("FAILED ") or x.startswith("ERROR ")][:3]
    said = [x for x in lines if x.lower().startswith(("failed to", "failed:", "stopping early"))]
    reason = said[-1] if said else (lines[-1] if lines else "no output")
    return f"mutmut run exited {returncode}: {reason}" + (f" ({'; '.join(failed)})" if failed else "")


def counted(stats: dict, log="mutmut's output") -> tuple[int, int]:
    """(mutants run, of them killed) from score()'s stats: a run in which no mutant's tests
    ran (mutmut stopped before them, or no mapped test reaches any) is an error, not 0/0."""
    ran = stats["killed"] + stats["survived"] + stats.get("timeout", 0) + stats.get("segfault", 0)
    if not ran:
        raise SystemExit(f"mutation: no mutant ran: of {stats.get('total', 0)}, {stats.get('no_tests', 0)} "
                         f"reached by no mapped test, the others without a result; see {log}")
    return ran, ran - stats["survived"]


def score(where: Path) -> dict:
    mutmut = [str(Path(sys.executable).parent / "mutmut")]
    subprocess.run(mutmut + ["export-cicd-stats"], cwd=where, check=True, capture_output=True)
    stats = json.loads((where / "mutants" / "mutmut-cicd-stats.json").read_text())
    survivors, timed_out = [], []
    for meta in (where / "mutants").rglob("*.py.meta"):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        survivors += [name for name, code in codes.items() if code == 0]
        timed_out += [name for name, code in codes.items() if code in TIMEOUT_CODES]
    stats["survivors"], stats["timed_out"] = sorted(survivors), sorted(timed_out)
    return stats


# mutmut 3.8's exit codes for a timeout (mutmut/stats.py; SIGXCPU: its CPU limit per mutant): on
# a loaded machine a mutant whose tests pass is stopped too (73 of 96 rerun fresh passed on
# 2026-12-06), so a timeout counts as killed only once a fresh rerun fails or times out too
TIMEOUT_CODES = (36, -24, 24, 152, 255)
FRESH_LIMIT = 600  # seconds of wall time for one fresh rerun; a mutant that loops is stopped


def all_mutant_names(where: Path) -> list[str]:
    """Every mutant of the targets: mutmut generates them all (and maps the tests, which it
    keeps for the next run) before it notices that a filter matching no name matches nothing."""
    mutmut = str(Path(sys.executable).parent / "mutmut")
    subprocess.run([mutmut, "run", "no-mutant-has-this-name"], cwd=where, capture_output=True, text=True)
    names = [name for meta in (where / "mutants").rglob("*.py.meta")
             for name in json.loads(meta.read_text())["exit_code_by_key"]]
    if not names:
        raise SystemExit("mutation: mutmut generated no mutants (is a mapped test failing on the unmutated code?)")
    return sorted(names)


def of_functions(names: list[str], functions: list[str]) -> list[str]:
    """The mutants of module-level functions `functions`: mutmut names them
    <module>.x_<function>__mutmut_<n>."""
    marks = tuple(f".x_{f}__mutmut_" for f in functions)
    return [n for n in names if any(m in n for m in marks)]


def sampled(names: list[str], share: float, seed: int) -> list[str]:
    """A uniform sample of the mutants, the same for the same seed: when a whole folder costs
    more hours than a session has, a sample's kill rate estimates the folder's."""
    import random
    count = max(1, round(share * len(names)))
    return sorted(random.Random(seed).sample(names, count))


def interval(killed: int, ran: int) -> str:
    """The 95% Wilson interval of a sampled kill rate, in percent."""
    if not ran:
        return "no mutant ran"
    z, rate = 1.96, killed / ran
    centre = (rate + z * z / (2 * ran)) / (1 + z * z / ran)
    half = z * ((rate * (1 - rate) / ran + z * z / (4 * ran * ran)) ** 0.5) / (1 + z * z / ran)
    return f"{100 * (centre - half):.1f}% to {100 * (centre + half):.1f}% (95%)"


def refresh_tests(where: Path) -> list[str]:
    """Copy today's tests/ into the scratch copy (tests written for survivors since the run)
    and return the run's mapped test files and those its targets are mapped to now (a file
    written for the survivors, named in TESTS before it existed), to be run whole: the run's
    per-function map knows only the tests there were when it started."""
    target = where / "mutants" / "tests"
    for source in (ROOT / "tests").glob("*.py"):
        shutil.copy2(source, target / source.name)
    settings = (where / "pyproject.toml").read_text().split("[tool.mutmut]", 1)[1]

    def setting(name: str) -> list[str]:
        line = next(x for x in settings.splitlines() if x.startswith(name + " "))
        return json.loads(line.split("=", 1)[1])
    # the mapped files first: a survivor killed by a test written for it stops there (-x)
    mapped = [t for pattern in setting("only_mutate") for t in mapped_tests(pattern.removesuffix("/*"))]
    return list(dict.fromkeys(mapped + setting("pytest_add_cli_args_test_selection")))


def recheck(where: Path, survivors: list[str], jobs: int, whole_files: list[str] | None = None) -> dict[str, bool]:
    """Each survivor run again in a fresh interpreter (mutant name -> still survives).

    mutmut forks each mutant's test run from a process that ran the whole mapped suite on
    the unmutated code, so the module-level caches that process filled (hash-consed nodes,
    memo tables keyed by shapes or metadata) answer before a mutated line runs: a mutant
    there survives whatever the tests check. A fresh interpreter has only what importing
    fills, so a survivor here is the tests' miss."""
    from concurrent.futures import ThreadPoolExecutor
    stats = json.loads((where / "mutants" / "mutmut-stats.json").read_text())
    tests_of = stats["tests_by_mangled_function_name"]

    def tests_for(name: str) -> list[str]:
        if whole_files:
            return whole_files
        return sorted(tests_of.get(name.rsplit("__mutmut_", 1)[0], []))

    def passes(mutant: str, tests: list[str]) -> subprocess.CompletedProcess:
        env = {**os.environ, "MUTANT_UNDER_TEST": mutant, "PYTHONPATH": "."}  # "": the unmutated code
        command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", "-p", "no:cacheprovider",
                   "--timeout=600", *tests]
        try:
            return subprocess.run(command, cwd=where / "mutants", env=env, capture_output=True, text=True,
                                  timeout=FRESH_LIMIT if mutant else None)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(command, 1)  # it loops: killed

    # the same tests pass fresh on the unmutated code, or a failure here would say nothing of a mutant
    baseline = passes("", sorted({t for name in survivors for t in tests_for(name)}))
    if baseline.returncode != 0:
        print(baseline.stdout[-3000:], file=sys.stderr)
        raise SystemExit("mutation: the survivors' tests fail in a fresh interpreter without a mutant (above)")

    def run(name: str) -> tuple[str, bool]:
        tests = tests_for(name)
        return name, not tests or passes(name, tests).returncode == 0

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return dict(pool.map(run, survivors))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", help="modules or folders, e.g. uopcli/core/simplify")
    parser.add_argument("--tests", help="comma-separated test files instead of the mapped ones")
    parser.add_argument("--max-children", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("--sample", type=float, metavar="SHARE", help="run only this share (0-1) of the "
                        "mutants, drawn uniformly, and print the score with its 95%% interval")
    parser.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0)")
    parser.add_argument("--functions", metavar="NAMES", help="comma-separated: only the mutants of these "
                        "functions (module-level, e.g. _tangents_tagged,compute_jvp); with --sample, a share of them")
    parser.add_argument("--current-tests", action="store_true", help="with --recheck: copy today's tests into "
                        "DIR first and run the mapped test files whole (tests written for the survivors since)")
    parser.add_argument("--recheck", metavar="DIR", help="only run the survivors of an earlier run in DIR "
                        "(out/mutation/<target>) again, each in a fresh interpreter")
    args = parser.parse_args()
    if args.recheck:
        where = Path(args.recheck)
        return report_rechecked(where, args.max_children, whole_files=refresh_tests(where) if args.current_tests else None)
    if not args.targets:
        parser.error("give a module or folder to mutate (or --recheck DIR)")
    missing = [t for t in args.targets if not (ROOT / t).exists()]
    if missing:
        raise SystemExit(f"mutation: {' '.join(missing)} does not exist")
    if args.tests:  # given: a target no mapping covers can be run too
        tests = args.tests.split(",")
    else:
        tests = list(dict.fromkeys(t for target in args.targets for t in mapped_tests(target)))
    where = scratch_copy(args.targets, tests)
    target = " ".join(args.targets)
    print(f"mutation: {target} with {' '.join(tests)}, in {where.relative_to(ROOT)}", flush=True)
    mutmut = str(Path(sys.executable).parent / "mutmut")
    chosen = []
    if args.sample is not None and not 0 < args.sample <= 1:
        parser.error("--sample is a share between 0 and 1")
    if args.sample is not None or args.functions:
        every = all_mutant_names(where)
        if args.functions:
            every = of_functions(every, args.functions.split(","))
            if not every:
                raise SystemExit(f"mutation: no mutants of {args.functions} in {target}")
        chosen = sampled(every, args.sample, args.seed) if args.sample is not None else every
        print(f"mutation: {len(chosen)} of the {len(every)} mutants" +
              (f" (a sample, seed {args.seed})" if args.sample is not None else ""), flush=True)
    run = subprocess.run([mutmut, "run", "--max-children", str(args.max_children), *chosen], cwd=where,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ONE_THREAD)
    log = where / "mutmut-run.log"
    log.write_text(run.stdout)
    stopped = run_failure(run.returncode, run.stdout)
    if stopped or not (where / "mutants").exists():
        print(run.stdout[-4000:], file=sys.stderr)
        raise SystemExit(f"mutation: {stopped or 'mutmut made no mutants/'}; its output: {log.relative_to(ROOT)}")
    stats = score(where)
    ran, killed = counted(stats, log.relative_to(ROOT))
    print(json.dumps({k: v for k, v in stats.items() if k != "survivors"}))
    for name in stats["survivors"]:
        print(f"survived: {name}")
    print(f"mutation score for {target}: {killed}/{ran} killed ({100 * killed / max(ran, 1):.1f}%); "
          f"{stats.get('no_tests', 0)} mutants no mapped test reaches; diffs: cd {where.relative_to(ROOT)} && "
          "mutmut show NAME")
    if chosen:
        print(f"the whole targets' score, estimated from the sample: {interval(killed, ran)}")
    if stats["survivors"] or stats["timed_out"]:
        report_rechecked(where, args.max_children, ran=ran, killed=killed)
    return 0


def report_rechecked(where: Path, jobs: int, ran: int | None = None, killed: int | None = None,
                     whole_files: list[str] | None = None) -> int:
    """Print which survivors a fresh interpreter kills, and the score counted with them."""
    stats = score(where)
    if ran is None:
        ran, killed = counted(stats, where / "mutmut-run.log")
    alive = recheck(where, stats["survivors"] + stats["timed_out"], jobs, whole_files)
    for name, survives in sorted(alive.items()):
        kind = "timed out" if name in stats["timed_out"] else "survived"
        print(f"{kind}, {'passes fresh' if survives else 'killed fresh'}: {name}")
    revived = sum(alive[name] for name in stats["timed_out"])
    fresh = killed - revived + sum(not alive[name] for name in stats["survivors"])
    print(f"mutation score with the survivors and timeouts rerun in fresh interpreters: {fresh}/{ran} killed "
          f"({100 * fresh / max(ran, 1):.1f}%); {revived} of {len(stats['timed_out'])} timeouts pass fresh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
