"""Build and check record folders from train logs.

    tools/py -m records.make parse LOG...                        per-seed results as JSON (absent ones named)
    tools/py -m records.make make --name NAME --author A --github-id G [--track T] [--baseline DIR] LOG...
    tools/py -m records.make check DIR                           rule check; exit 1 with one line per problem

`make` refuses (exit 2, nothing written) logs whose code_sha256 is not the source of --script (the readable
train_gpt.py), whose `Code size` is not the packed file's size, that hold more than one run (a run resumed from its
own checkpoints is one run in slices, and is shown as such), whose configs differ in anything but SEED and RUN_ID,
or that break a rule of --track that the logs can show (records/check.py: the record track's training and
evaluation <= 600 s on 8xH100 and its significance test, which needs --baseline; every track's byte limit).
Otherwise it writes records/<track>/<date>_<Name>/: the files listed at the end of --help. It builds the folder in a temporary folder beside it and moves it into place only when it is
complete, then runs `check` on it and exits 1 if that finds problems. A module the tool needs and
this Python lacks (brotli, matplotlib, scipy for --baseline; torch for check's import) is exit 2 with the module
named.
"""
import argparse
import ast
import datetime
import json
import math
import os
import re
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from statistics import mean, stdev
from typing import Dict, List, Optional, Tuple

from records.check import (IMPROVEMENT_MARGIN_NATS, READABLE_NAME, RECORD_TRACK, SIGNIFICANCE_LEVEL, CountedCode,
                           MissingDependency, check_folder, provenance_problems, require_modules,
                           seed_and_config_problems, track_problems)
from records.parse import (PRE_TTT_KEYS, ROUNDTRIP_KEYS, SIZE_LIMIT_BYTES, TTT_KEY, Headline, SeedRun,
                           choose_headline, parse_log)

DEFAULT_TRACK = RECORD_TRACK
PLOT_NAME = "curves.png"
# What the packed train_gpt.py needs beyond the challenge's image (torch, numpy, sentencepiece).
FOLDER_REQUIREMENTS = "# the packed train_gpt.py decodes its source with brotli\nbrotli\n"
# what an artifact of the seeds' COMPRESSOR (their config:compressor= line) needs to be read
COMPRESSOR_REQUIREMENTS = {"pergroup": "# COMPRESSOR=pergroup artifacts are rANS-coded\nconstriction>=0.5\n"}
# Every file make writes besides the logs (train_seed<N>.log), with what it is: --help lists them from here.
GENERATED_FILES = {
    "train_gpt.py": "the counted code: --script packed by records/pack.py",
    READABLE_NAME: "--script itself, the readable source with its comments (not counted)",
    "requirements.txt": "what the packed file needs beyond torch, numpy and sentencepiece",
    "submission.json": "the challenge's metadata: name, author, val_bpb, bytes, seeds",
    PLOT_NAME: "train loss and val_bpb of every seed",
    "README.md": "per-seed table, significance, slices of resumed runs, the run command, hardware and versions",
}


def seed_count(count: int) -> str:
    return "%d seed%s" % (count, "" if count == 1 else "s")


# ---- statistics ----
def mean_std(values: List[float]) -> Tuple[float, Optional[float]]:
    """Mean and sample standard deviation (n - 1); the std is None for a single seed."""
    return mean(values), (stdev(values) if len(values) > 1 else None)


def welch_improvement_test(new: List[float], baseline: List[float], margin: float = IMPROVEMENT_MARGIN_NATS) -> dict:
    """One-sided Welch t-test of H1: mean(baseline) - mean(new) > margin (H0: <= margin), on val_loss in nats.
    Equivalent to a Welch test of baseline against new + margin. p is None when a side has < 2 values or
    both sides have zero variance."""
    from scipy import stats

    result = {"n_new": len(new), "n_baseline": len(baseline), "margin": margin,
              "improvement": mean(baseline) - mean(new), "t": None, "dof": None, "p_value": None}
    if len(new) < 2 or len(baseline) < 2:
        result["reason"] = "needs at least 2 seeds on each side"
        return result
    variance_new, variance_base = stdev(new) ** 2 / len(new), stdev(baseline) ** 2 / len(baseline)
    if variance_new + variance_base == 0:
        result["reason"] = "all values are identical on both sides: the t statistic is undefined"
        return result
    test = stats.ttest_ind(baseline, [value + margin for value in new], equal_var=False, alternative="greater")
    result["t"], result["p_value"] = float(test.statistic), float(test.pvalue)
    result["dof"] = (variance_new + variance_base) ** 2 / (variance_new ** 2 / (len(new) - 1)
                                                           + variance_base ** 2 / (len(baseline) - 1))
    return result


# ---- the exact command ----
def hyperparameter_defaults(source: str) -> Dict[str, str]:
    """Field -> str(default) of the `Hyperparameters` dataclass, read with ast (nothing is imported)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Hyperparameters":
            defaults = {}
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
                    try:
                        defaults[item.target.id] = str(ast.literal_eval(item.value))
                    except ValueError:
                        continue
            return defaults
    return {}


MACHINE_PATHS = {"data_path": "./data/datasets/", "tokenizer_path": "./data/tokenizers/"}  # the data tools' folders


def run_command(run: SeedRun, defaults: Dict[str, str]) -> str:
    """The launch that reproduces this log: every setting that differs from the script's default (all of them
    when the defaults are unknown), then torchrun with the log's world size. Data paths outside ./data/ become
    ./data/datasets/<name> and ./data/tokenizers/<name>, where the data tools put them."""
    settings = []
    for key in sorted(run.config):
        if key not in ("seed", "run_id") and defaults.get(key) != run.config[key]:
            value = run.config[key]
            if key in MACHINE_PATHS and not value.startswith("./data/"):  # where the data lay on the run's machine
                value = MACHINE_PATHS[key] + os.path.basename(os.path.normpath(value))
            settings.append("%s=%s" % (key.upper(), shlex.quote(value)))
    settings.append("SEED=%s RUN_ID=%s" % (run.seed, shlex.quote(run.run_id or "<any>")))
    launcher = "torchrun --standalone --nproc_per_node=%d train_gpt.py" % (run.world_size or 8)
    return " \\\n".join(settings + [launcher])


# ---- results table ----
def _fmt(value, pattern="%.8f", absent="—") -> str:
    return absent if value is None else pattern % value


def _seed_row(run: SeedRun, headline_key: Optional[str]) -> List[str]:
    pre, post = run.score(PRE_TTT_KEYS), run.score(TTT_KEY)
    gain = post[2] - pre[2] if pre and post else None
    headline = run.score(headline_key) if headline_key else None
    return [str(run.seed), _fmt(run.steps, "%d"), _fmt(run.step_avg_ms, "%.2f ms"), _fmt(run.train_time_ms, "%d ms"),
            _fmt(pre and pre[2]), _fmt(post and post[2]), _fmt(gain, "%+.8f"),
            _fmt(run.eval_time_ms.get("legal_ttt"), "%d ms"), _fmt(headline and headline[1]),
            _fmt(headline and headline[2]), _fmt(run.bytes_model, "%d"), _fmt(run.bytes_total, "%d"),
            "[log](train_seed%s.log)" % run.seed]


def results_table(runs: List[SeedRun], headline: Headline) -> str:
    header = ["Seed", "Steps", "step_avg", "Train time", "Pre-TTT val_bpb", "Post-TTT val_bpb (legal_ttt_exact)",
              "TTT gain", "TTT time", "Headline val_loss", "Headline val_bpb", "Model bytes", "Total bytes", "Log"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run in runs:
        lines.append("| " + " | ".join(_seed_row(run, headline.key)) + " |")
    summary = ["**Mean**"] + [""] * (len(header) - 1)
    columns = [(4, PRE_TTT_KEYS, 2), (5, (TTT_KEY,), 2)]
    if headline.key:
        columns += [(8, (headline.key,), 1), (9, (headline.key,), 2)]
    for column, keys, index in columns:
        values = [run.score(keys)[index] for run in runs if run.score(keys)]
        if len(values) == len(runs):
            average, spread = mean_std(values)
            summary[column] = "**%.8f**%s" % (average, "" if spread is None else " (std %.8f)" % spread)
    steps = [run.steps for run in runs if run.steps is not None]
    summary[1] = "%.1f" % mean(steps) if len(steps) == len(runs) else ""
    totals = [run.bytes_total for run in runs if run.bytes_total is not None]
    summary[11] = "max %d" % max(totals) if totals else ""
    lines.append("| " + " | ".join(summary) + " |")
    return "\n".join(lines)


# ---- plot ----
def draw_curves(runs: List[SeedRun], baseline: List[SeedRun], path: Path) -> None:
    """Training loss and validation bpb against step for every seed; the baseline's seeds dashed in grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (loss_axis, bpb_axis) = plt.subplots(1, 2, figsize=(12, 4.5))
    points = {loss_axis: [], bpb_axis: []}
    for group, style in ((baseline, {"linestyle": "--", "color": "0.6", "linewidth": 1.0}), (runs, {})):
        for run in group:
            label = ("baseline " if group is baseline else "") + "seed %s" % run.seed
            curves = ((loss_axis, run.train_curve, {}), (bpb_axis, [(s, b) for s, _, b in run.val_curve],
                                                          {"marker": "."}))
            for axis, curve, extra in curves:
                if curve:
                    axis.plot(*zip(*curve), label=label, **style, **extra)
                    points[axis] += curve
    loss_axis.set(title="training loss (nats/token)", xlabel="step", ylabel="train_loss")
    bpb_axis.set(title="validation bits per byte during training", xlabel="step", ylabel="val_bpb")
    for axis, curve in points.items():
        axis.grid(alpha=0.3)
        if not curve:
            continue
        axis.legend(fontsize=8)
        # The first steps' values (loss ~6.9, bpb ~4.1) would flatten the rest: the top follows the later ones.
        later = [value for step, value in curve if step >= 0.05 * max(s for s, _ in curve)]
        if len(later) >= 3 and max(later) < max(value for _, value in curve):
            low, high = min(later), max(later)
            axis.set_ylim(low - 0.05 * (high - low or 1.0), high + 0.05 * (high - low or 1.0))
            axis.set_title(axis.get_title() + " (first steps off the top)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


# ---- README and submission.json ----
def _runs_hardware(runs: List[SeedRun]) -> str:
    descriptions = set()
    for run in runs:
        if run.gpu_names:
            gpus = run.gpu_names[:run.world_size] if run.world_size else run.gpu_names
            names = sorted(set(gpus))
            descriptions.add("%d×%s" % (len(gpus), " + ".join(names)))
        elif run.attention_backend and "cpu" in run.attention_backend:
            descriptions.add("CPU (no GPU)")
        else:
            descriptions.add("unknown (the log has no nvidia-smi output)")
    return "; ".join(sorted(descriptions))


def _software(runs: List[SeedRun]) -> List[str]:
    def values(attribute):
        found = sorted({str(getattr(run, attribute)) for run in runs if getattr(run, attribute)})
        return ", ".join(found) if found else "unknown"
    return ["- Hardware: %s" % _runs_hardware(runs),
            "- NVIDIA driver %s, CUDA %s (nvidia-smi)" % (values("driver_version"), values("cuda_version")),
            "- Python %s, PyTorch %s" % (values("python_version"), values("pytorch_version")),
            "- Attention backend: %s; world size %s" % (values("attention_backend"), values("world_size"))]


def _significance_section(runs: List[SeedRun], headline: Headline, baseline: List[SeedRun],
                          baseline_headline: Headline, baseline_dir: str) -> Tuple[List[str], dict]:
    new = [run.exact[headline.key][0] for run in runs] if headline.key else []
    base = [run.exact[baseline_headline.key][0] for run in baseline] if baseline_headline.key else []
    lines = ["## Significance against the previous record", "",
             "Baseline: `%s` (%d logs; its headline: %s)." % (baseline_dir, len(baseline), baseline_headline.note)]
    if not new or not base:
        lines += ["", "**Not computed**: %s has no headline score in every log." % ("this record" if not new
                                                                                   else "the baseline")]
        return lines, {"dir": baseline_dir, "p_value": None, "reason": "missing headline scores"}
    test = welch_improvement_test(new, base)
    bpb_per_nat = [run.exact[headline.key][1] / run.exact[headline.key][0] for run in runs
                   if run.exact[headline.key][0] > 0]
    lines += ["",
              "What is tested: the challenge asks for an improvement of at least %.3f **nats** at p < %.2f. Nats "
              "are `val_loss` (mean cross-entropy per token, natural log), not `val_bpb`; we test the per-seed "
              "`val_loss` of the headline lines (`%s` here, `%s` in the baseline) with a one-sided Welch "
              "t-test: H0 `mean(baseline) - mean(this) <= %.3f`, H1 `> %.3f` (unequal variances, Welch-"
              "Satterthwaite dof; scipy `ttest_ind(baseline, this + %.3f, equal_var=False, alternative="
              "'greater')`)." % (IMPROVEMENT_MARGIN_NATS, SIGNIFICANCE_LEVEL, headline.key, baseline_headline.key,
                                 IMPROVEMENT_MARGIN_NATS, IMPROVEMENT_MARGIN_NATS, IMPROVEMENT_MARGIN_NATS), ""]
    if bpb_per_nat:
        lines += ["For scale: val_bpb = val_loss / ln 2 × tokens/byte, so here %.3f nats/token ≈ %.5f val_bpb "
                  "(%.4f tokens per byte)." % (IMPROVEMENT_MARGIN_NATS, IMPROVEMENT_MARGIN_NATS * mean(bpb_per_nat),
                                               mean(bpb_per_nat) * math.log(2)), ""]
    lines.append("| | n | mean val_loss | mean val_bpb |")
    lines.append("|---|---|---|---|")
    lines.append("| this record | %d | %.8f | %.8f |"
                 % (len(new), mean(new), mean(run.exact[headline.key][1] for run in runs)))
    lines.append("| baseline | %d | %.8f | %.8f |" % (len(base), mean(base),
                                                     mean(r.exact[baseline_headline.key][1] for r in baseline)))
    lines.append("")
    if test["p_value"] is None:
        verdict = "**p-value not computed** (%s): the challenge's p < %.2f bar is **not shown**." % (
            test["reason"], SIGNIFICANCE_LEVEL)
    else:
        meets = test["p_value"] < SIGNIFICANCE_LEVEL
        verdict = ("Improvement %.6f nats; t = %.4f, dof = %.2f, **p = %.3g**: this %s the challenge's bar "
                   "(p < %.2f for an improvement of at least %.3f nats)."
                   % (test["improvement"], test["t"], test["dof"], test["p_value"],
                      "**MEETS**" if meets else "**MISSES**", SIGNIFICANCE_LEVEL, IMPROVEMENT_MARGIN_NATS))
    lines.append(verdict)
    summary = {"dir": baseline_dir, "metric": baseline_headline.key, "tested": "val_loss (nats per token)",
               "margin_nats": IMPROVEMENT_MARGIN_NATS, "improvement_nats": test["improvement"], "t": test["t"],
               "dof": test["dof"], "p_value": test["p_value"],
               "meets_p_below_0_01": test["p_value"] is not None and test["p_value"] < SIGNIFICANCE_LEVEL}
    return lines, summary


def _absent_section(runs: List[SeedRun], headline: Headline) -> List[str]:
    lines = []
    for run in runs:
        missing = run.absent()
        if missing:
            lines.append("- `train_seed%s.log` lacks: %s" % (run.seed, "; ".join(missing)))
    if not lines:
        return []
    return ["## Absent results", "", "These logs stop before some results (the folder fails `check` until "
            "the headline line is present in every log):", ""] + lines + [""]


def _warnings_section(runs: List[SeedRun]) -> List[str]:
    """WARNING/ERROR lines of the logs (an ignored env setting, a size overrun) with the seeds that printed them."""
    seen = {}
    for run in runs:
        for line in run.warnings:
            seen.setdefault(line, []).append(str(run.seed))
    if not seen:
        return []
    return (["## Warnings in the logs", ""]
            + ["- `%s` (seed %s)" % (line, ", ".join(seeds)) for line, seeds in seen.items()] + [""])


def _slices_section(runs: List[SeedRun]) -> List[str]:
    """A run resumed from its own checkpoints (RESUME=, docs/checkpoint.md) trained in slices, each appended to its
    log: one line per slice, so a reader sees where it stopped and where it went on."""
    lines = []
    for run in runs:
        if len(run.slices) > 1:
            lines += ["- `train_seed%s.log`, one run in %d slices:" % (run.seed, len(run.slices))]
            lines += ["  - %s" % slice_.describe() for slice_ in run.slices]
    if not lines:
        return []
    return (["## Slices", "", "Runs stopped and resumed from their checkpoints (bit-exact on a CPU; docs/checkpoint.md). "
             "A resume trains the steps after its checkpoint again, so the curves and results are the last slice's "
             "from there on:", ""] + lines + [""])


def write_readme(folder: Path, args, runs: List[SeedRun], headline: Headline, hardware: str,
                 significance: List[str], defaults: Dict[str, str], code: CountedCode) -> None:
    scores = [run.exact[headline.key] for run in runs] if headline.key else []
    totals = [run.bytes_total for run in runs if run.bytes_total is not None]
    if scores:
        average, spread = mean_std([score[1] for score in scores])
        head = "**val_bpb: %.8f** (%d-seed mean%s; %s)" % (
            average, len(scores), "" if spread is None else ", std %.8f" % spread, headline.note)
    else:
        head = "**val_bpb: absent** (%s)" % headline.note
    lines = ["# %s" % args.name, "",
             "%s | **%s bytes** (largest seed, cap %s) | %s" % (
                 head, "{:,}".format(max(totals)) if totals else "absent", "{:,}".format(SIZE_LIMIT_BYTES), hardware),
             ""]
    if args.blurb:
        lines += [args.blurb, ""]
    lines += ["## Results", "", results_table(runs, headline), "",
              "Pre-TTT is the int6 sliding-window score (`final_int6_sliding_window_exact`; old logs: "
              "`final_int8_zlib_roundtrip_exact`), post-TTT the legal score-first TTT score (`legal_ttt_exact`). "
              "Means and sample standard deviations (n − 1) are over the seeds. Total bytes = compressed model "
              "(`Serialized model int6+<compressor>`) + counted code (`Code size`): the `Total submission size` "
              "line.", ""]
    lines += _absent_section(runs, headline) + _warnings_section(runs) + _slices_section(runs)
    lines += ["## Curves", "", "![training loss and validation bpb of every seed](%s)" % PLOT_NAME, ""]
    if significance:
        lines += significance + [""]
    if args.notes:
        lines += [Path(args.notes).read_text(encoding="utf-8").rstrip(), ""]
    lines += ["## Run command", "",
              "Settings that differ from train_gpt.py's defaults, from the logs' `config:` lines (identical for "
              "every seed but SEED and RUN_ID):", "", "```bash", run_command(runs[0], defaults), "```", "",
              "The other seeds: %s." % (", ".join("`SEED=%s RUN_ID=%s`" % (run.seed, run.run_id)
                                                   for run in runs[1:]) or "none"),
              "", "## Hardware and software (from the logs)", ""]
    lines += _software(runs) + [
        "- train_gpt.py: %d bytes, the counted code: the source (%d bytes, sha256 `%s`, the `code_sha256` of every "
        "log) packed by records/pack.py, i.e. %s without its comments and docstrings, every line in its place (a "
        "traceback's line numbers are the readable file's). Every log holds that source after its `code_sha256` "
        "line; `tools/py -m records.pack unpack train_gpt.py` prints it too" % (
            len(code.data), len(code.source.encode("utf-8")), code.source_sha256, READABLE_NAME),
        "- %s: the readable train_gpt.py (%d bytes)" % (READABLE_NAME, len(code.readable.encode("utf-8"))),
        "- requirements.txt: what the packed file needs beyond torch, numpy and sentencepiece", "",
        "Built with `tools/py -m records.make make`; `tools/py -m records.make check records/%s/%s` re-runs the "
        "rule checks." % (args.track, folder.name), ""]
    (folder / "README.md").write_text("\n".join(lines), encoding="utf-8")


def submission_record(args, runs: List[SeedRun], headline: Headline, hardware: str, code: CountedCode,
                      significance: Optional[dict]) -> dict:
    scores = [run.exact[headline.key] for run in runs] if headline.key else []
    totals = [run.bytes_total for run in runs if run.bytes_total is not None]
    bpb_mean, bpb_std = mean_std([score[1] for score in scores]) if scores else (None, None)
    pre = [run.score(PRE_TTT_KEYS)[2] for run in runs if run.score(PRE_TTT_KEYS)]

    def rounded(value):
        return None if value is None else round(value, 8)
    record = {
        "name": args.name, "author": args.author, "github_id": args.github_id, "date": args.date,
        "track": args.track, "hardware": hardware,
        "blurb": args.blurb or "%s; %s on %s; val_bpb is the mean %s." % (args.name, seed_count(len(runs)), hardware,
                                                                         headline.key or "(absent)"),
        "val_bpb": rounded(bpb_mean), "val_bpb_std": rounded(bpb_std),
        "val_loss": rounded(mean(score[0] for score in scores)) if scores else None,
        "metric": headline.key, "metric_note": headline.note,
        "pre_ttt_val_bpb": rounded(mean(pre)) if len(pre) == len(runs) else None,
        "bytes_total": max(totals) if len(totals) == len(runs) else None, "bytes_code": len(code.data),
        "bytes_code_readable": len(code.readable.encode("utf-8")),
        "seeds": [run.seed for run in runs],
        "seed_results": [{
            "seed": run.seed, "log": "train_seed%s.log" % run.seed,
            "val_bpb": rounded(run.exact[headline.key][1]) if headline.key else None,
            "val_loss": rounded(run.exact[headline.key][0]) if headline.key else None,
            "pre_ttt_val_bpb": rounded(run.score(PRE_TTT_KEYS)[2]) if run.score(PRE_TTT_KEYS) else None,
            "roundtrip_val_bpb": rounded(run.score(ROUNDTRIP_KEYS)[2]) if run.score(ROUNDTRIP_KEYS) else None,
            "steps": run.steps, "step_avg_ms": run.step_avg_ms, "train_time_ms": run.train_time_ms,
            "bytes_model": run.bytes_model, "bytes_total": run.bytes_total, "absent": run.absent(),
            "slices": [slice_.describe() for slice_ in run.slices] if len(run.slices) > 1 else [],
        } for run in runs],
        "code_sha256": code.source_sha256,
        "python_version": runs[0].python_version, "pytorch_version": runs[0].pytorch_version,
    }
    if significance is not None:
        record["baseline"] = significance
    return record


# ---- commands ----
def _folder_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", name).strip("_.") or "record"


def _parse_baseline(directory: str) -> List[SeedRun]:
    folder = Path(directory)
    paths = sorted(folder.glob("*.log")) or sorted(folder.glob("*.txt"))
    return [parse_log(path) for path in paths]


def baseline_data_problems(runs: List[SeedRun], baseline: List[SeedRun]) -> List[str]:
    """Where the logs and the baseline's say they scored other data: a p-value between them would compare
    datasets or tokenizers, not training. Only what both sides' logs state is compared."""
    problems = []
    for attribute, what in (("val_tokens", "validation tokens"), ("val_bytes", "validation bytes"),
                            ("tokenizer_sha256", "tokenizer sha256")):
        ours = {getattr(run, attribute) for run in runs} - {None}
        theirs = {getattr(run, attribute) for run in baseline} - {None}
        if ours and theirs and ours != theirs:
            problems.append("--baseline: %s %s in the logs, %s in the baseline's: other data or another tokenizer "
                            "(--allow-baseline-mismatch compares them anyway)"
                            % (what, ", ".join(map(str, sorted(ours))), ", ".join(map(str, sorted(theirs)))))
    return problems


def read_script(script: Path) -> CountedCode:
    """--script (readable) -> the packed counted file, its source (stripped) and the readable text."""
    from records.pack import is_packed, pack_source, read_source, strip_source

    if is_packed(script.read_bytes()):
        raise ValueError("packed; give the readable train_gpt.py (the folder ships it as %s beside the packed one)"
                         % READABLE_NAME)
    readable = read_source(script)
    source = strip_source(readable)  # what the packed file runs, and every log's code_sha256
    return CountedCode("train_gpt.py", pack_source(source), packed=True, source=source, readable=readable)


@dataclass
class Baseline:
    """--baseline's logs and the significance test against them (empty without --baseline)."""

    runs: List[SeedRun]
    lines: List[str]  # the README section
    summary: Optional[dict]  # submission.json's `baseline`


def compare_with_baseline(args, runs: List[SeedRun], headline: Headline) -> Baseline:
    baseline = _parse_baseline(args.baseline) if args.baseline else []
    if args.baseline and not baseline:
        print("warning: --baseline %s holds no *.log or *.txt logs" % args.baseline, file=sys.stderr)
    if not baseline:
        return Baseline([], [], None)
    return Baseline(baseline, *_significance_section(runs, headline, baseline, choose_headline(baseline),
                                                     args.baseline))


def write_folder(folder: Path, args, runs: List[SeedRun], headline: Headline, code: CountedCode,
                 baseline: Baseline) -> None:
    """Every file of the record folder, into `folder` (which exists and holds nothing of ours)."""
    (folder / "train_gpt.py").write_bytes(code.data)
    (folder / READABLE_NAME).write_text(code.readable, encoding="utf-8", newline="\n")
    compressors = sorted({run.config.get("compressor", "") for run in runs})
    requirements = FOLDER_REQUIREMENTS + "".join(COMPRESSOR_REQUIREMENTS.get(name, "") for name in compressors)
    (folder / "requirements.txt").write_text(requirements, encoding="utf-8")
    for run in runs:
        shutil.copyfile(run.path, folder / ("train_seed%d.log" % run.seed))
    hardware = _runs_hardware(runs)
    draw_curves(runs, baseline.runs, folder / PLOT_NAME)
    defaults = hyperparameter_defaults(code.source)
    write_readme(folder, args, runs, headline, hardware, baseline.lines, defaults, code)
    record = submission_record(args, runs, headline, hardware, code, baseline.summary)
    (folder / "submission.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def publish_folder(target: Path, build) -> None:
    """Build the folder beside `target` with build(folder) and move it into place only once build returns: a crash
    leaves neither a half-built folder nor a stale build behind. Replacing an existing folder (--force) keeps the
    files of it that make does not write (notes, extra plots); its logs are replaced by the new ones."""
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".%s.building-" % target.name, dir=target.parent))
    try:
        folder = scratch / target.name
        folder.mkdir()
        if target.is_dir():
            for path in target.iterdir():
                if path.name not in GENERATED_FILES and not re.match(r"train_seed\d+\.log$", path.name):
                    (shutil.copytree if path.is_dir() else shutil.copy2)(path, folder / path.name)
        build(folder)
        if target.exists():
            os.rename(target, scratch / "replaced")
        os.rename(folder, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def command_make(args) -> int:
    # torch and numpy: records.pack packs with train_gpt.py's pack_source, the function the trainer counts bytes with
    require_modules("records.make make", ["brotli", "matplotlib", "torch", "numpy"] + (["scipy"] if args.baseline
                                                                                       else []))
    script = Path(args.script)
    if not script.is_file():
        print("error: %s: no such file (pass --script)" % script, file=sys.stderr)
        return 2
    from records.pack import PackError
    try:
        code = read_script(script)
    except (PackError, SyntaxError, ValueError) as exc:
        print("error: --script %s: %s" % (script, exc), file=sys.stderr)
        return 2
    runs = sorted((parse_log(path) for path in args.logs), key=lambda run: (run.seed is None, run.seed or 0))
    refusals = provenance_problems(runs, code) + seed_and_config_problems(runs)
    if args.baseline and not args.allow_baseline_mismatch:
        refusals += baseline_data_problems(runs, _parse_baseline(args.baseline))
    headline = choose_headline(runs)
    baseline = compare_with_baseline(args, runs, headline) if not refusals else Baseline([], [], None)
    rules, notes = track_problems(args.track, runs, baseline.summary)
    if refusals or rules:
        print("refused: nothing written", file=sys.stderr)
        for problem in refusals + rules:
            print(problem)
        return 2
    for note in notes:
        print("note: " + note, file=sys.stderr)
    for run in runs:
        if run.absent():
            print("warning: %s (seed %s) lacks: %s" % (run.name, run.seed, "; ".join(run.absent())), file=sys.stderr)
        if len(run.slices) > 1:
            print("%s (seed %s): one run in %d slices: %s" % (run.name, run.seed, len(run.slices), "; ".join(
                slice_.describe() for slice_ in run.slices)), file=sys.stderr)
    print("headline: %s" % headline.note, file=sys.stderr)
    folder = Path(args.out) / args.track / ("%s_%s" % (args.date, _folder_name(args.name)))
    if folder.exists() and not args.force:
        print("error: %s exists (pass --force to replace it)" % folder, file=sys.stderr)
        return 2
    publish_folder(folder, lambda building: write_folder(building, args, runs, headline, code, baseline))
    print(folder)
    return report_check(folder, run_import=not args.skip_import_check)


def report_check(folder: Path, run_import: bool = True) -> int:
    try:
        problems, notes = check_folder(folder, run_import=run_import)
    except MissingDependency as exc:
        print("error: %s" % exc, file=sys.stderr)
        print("check: not done: %s could not be checked with this Python" % folder, file=sys.stderr)
        return 2
    for note in notes:
        print("note: " + note, file=sys.stderr)
    for problem in problems:
        print(problem)
    if problems:
        print("check: %d problem(s) in %s" % (len(problems), folder), file=sys.stderr)
        return 1
    print("check: %s passes" % folder, file=sys.stderr)
    return 0


def command_parse(args) -> int:
    runs = [parse_log(path) for path in args.logs]
    headline = choose_headline(runs)
    print(json.dumps({"headline": {"key": headline.key, "note": headline.note},
                      "seeds": [run.summary() for run in runs]}, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    folder_files = "\n".join("  %-22s %s" % item for item in GENERATED_FILES.items())
    parser = argparse.ArgumentParser(prog="tools/py -m records.make", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="make writes into the record folder:\n%s\n  %-22s the trainer's file log of "
                                            "each seed, as given" % (folder_files, "train_seed<N>.log"))
    commands = parser.add_subparsers(dest="command", required=True)
    parse = commands.add_parser("parse", help="print per-seed results of train logs as JSON")
    parse.add_argument("logs", nargs="+", help="train logs (ours or the challenge's)")
    make = commands.add_parser("make", help="build a record folder from one file log per seed")
    make.add_argument("logs", nargs="+", help="the trainer's file logs logs/<RUN_ID>.txt, one per seed")
    make.add_argument("--name", required=True, help="record name (README title; folder <date>_<Name>)")
    make.add_argument("--author", required=True, help="author's name for submission.json")
    make.add_argument("--github-id", required=True, help="author's GitHub id for submission.json")
    make.add_argument("--script", default="train_gpt.py", help="the readable train_gpt.py that produced the logs "
                                                               "(the folder gets it packed)")
    make.add_argument("--track", default=DEFAULT_TRACK, help="records/<track>/ (default %(default)s)")
    make.add_argument("--date", default=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
                      help="YYYY-MM-DD for the folder and submission.json (default: today, UTC)")
    make.add_argument("--blurb", default="", help="one-paragraph summary for README and submission.json")
    make.add_argument("--notes", help="a markdown file inserted into README (description, ablations, credits)")
    make.add_argument("--baseline", help="folder with the previous record's logs: adds the Welch t-test")
    make.add_argument("--allow-baseline-mismatch", action="store_true", help="compare with a baseline whose logs "
                      "state other validation data or another tokenizer (refused otherwise)")
    make.add_argument("--out", default=str(Path(__file__).resolve().parent), help="records root (default: "
                                                                                  "this package's folder)")
    make.add_argument("--force", action="store_true", help="replace an existing folder (files make does not write "
                                                           "are kept)")
    make.add_argument("--skip-import-check", action="store_true", help="skip the import part of the final check")
    check = commands.add_parser("check", help="check a record folder; exit 1 with one line per problem")
    check.add_argument("folder")
    check.add_argument("--skip-import-check", action="store_true", help="skip the import-side-effect check")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "parse":
        return command_parse(args)
    if args.command == "make":
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", args.date):
            print("error: --date %r is not YYYY-MM-DD" % args.date, file=sys.stderr)
            return 2
        try:
            return command_make(args)
        except MissingDependency as exc:
            print("error: %s" % exc, file=sys.stderr)
            return 2
    return report_check(Path(args.folder), run_import=not args.skip_import_check)


if __name__ == "__main__":
    sys.exit(main())
