"""README and docs/ stay true: every `NAME=` they mention is a setting of the trainer or a variable named
below, every relative link resolves (to a file, and to a heading where it names one), README stays a README (at
most README_MAX_LINES lines, linking every docs page), its commands work after the quick start, and what it says
about the test command, the CPU settings and the records example is what the repository does. Numbers that
describe the code (parameter counts, byte and line counts, defaults, the recipe table) are computed from the code
here, and any other such number must be a dated measurement (a date or a commit in its paragraph)."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tgpt_util import REPO, run_env, tgpt  # noqa: F401 (fixture)

README = REPO / "README.md"
# The record specs describe other scripts (their own variables, e.g. the 04-27 record's CASEOPS_ENABLED).
DOCS = sorted(path for path in (REPO / "docs").glob("*.md") if not path.name.startswith("SPEC"))
# Variables that are not trainer settings, each read by something the docs describe.
EXTERNAL = {
    "PRESET", "NPROC", "PYTHON", "TORCH_SPEC",  # run.sh and tools/python_env.sh
    "REQUIRE_TRITON_TESTS",  # tests: a missing triton fails instead of skipping
    "CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET",  # CUDA, Triton
    "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT",  # OpenMP (GOMP_: libgomp's, the one torch loads)
    "MATCHED_FINEWEB_REPO_ID", "MATCHED_FINEWEB_REMOTE_ROOT_PREFIX", "DATA_DIR",  # data/cached_challenge_fineweb.py
    "LATE_QAT",  # the 2026-03-23 record's published command: read by nothing, logged as IGNORED (differences.md)
}


def documents():
    return [README] + DOCS


README_MAX_LINES = 250


def test_readme_is_a_readme_and_links_every_docs_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    linked = set(re.findall(r"\]\((docs/[^)#\s]+)", text))
    pages = {"docs/" + path.name for path in (REPO / "docs").glob("*.md")}
    assert pages <= linked, "README does not link: %s" % sorted(pages - linked)


def test_every_env_mention_is_a_setting_or_a_known_variable(tgpt):
    settings = {field.name.upper() for field in tgpt.fields(tgpt.Hyperparameters)}
    unknown = []
    for path in documents():
        for name in re.findall(r"(?<![A-Za-z0-9_$])([A-Z][A-Z0-9_]{2,})=", path.read_text(encoding="utf-8")):
            if name not in settings and name not in EXTERNAL:
                unknown.append("%s: %s=" % (path.relative_to(REPO), name))
    assert not unknown, "not a setting of train_gpt.py: %s" % sorted(set(unknown))


def slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def test_every_relative_link_resolves():
    broken = []
    for path in documents():
        text = re.sub(r"<!--.*?-->", "", path.read_text(encoding="utf-8"), flags=re.S)  # not rendered
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            if not resolved.exists():
                broken.append("%s: %s (no such file)" % (path.relative_to(REPO), target))
            elif anchor and resolved.suffix == ".md":
                anchors = {slug(h) for h in re.findall(r"^#+ (.+)$", resolved.read_text(encoding="utf-8"), re.M)}
                if anchor not in anchors:
                    broken.append("%s: %s (no such heading)" % (path.relative_to(REPO), target))
    assert not broken, broken


def readme_commands():
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_readme_commands_work_after_the_quick_start():
    """`torchrun` is not on PATH after the quick start (README's `torchrun ...` exited 127)."""
    commands = readme_commands()
    assert not [line for line in commands if line.startswith("torchrun") or " torchrun " in line], commands
    assert any("tools/py -m torch.distributed.run --standalone --nproc_per_node=8 train_gpt.py" in line
               for line in commands)


def test_the_records_example_works_word_for_word_after_the_quick_start(tmp_path):
    """README's records example failed as written: its --baseline was the repository's 1xH100 folder, whose data no
    run on the bundled sample shares. Its commands run here word for word on a copy of the repository (the
    2026-03-23 recipe's tiny preset end to end through run.sh), with the sample built beforehand with fewer
    val documents and fewer, smaller steps and one TTT epoch set in the environment, so that it takes a minute."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"## Making and checking a record folder\n.*?```bash\n(.*?)```", text, re.S).group(1)
    root = tmp_path / "clone"
    root.mkdir()
    for name in ("run.sh", "train_gpt.py", "requirements.txt"):
        shutil.copy2(REPO / name, root / name)
    shutil.copytree(REPO / "tools", root / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    for package in ("records", "data"):
        (root / package).mkdir()
        for source in (REPO / package).glob("*.py"):
            shutil.copy(source, root / package / source.name)
    (root / "data" / "sample").mkdir()
    (root / "data" / "sample" / "tiny.jsonl.xz").symlink_to(REPO / "data" / "sample" / "tiny.jsonl.xz")
    built = subprocess.run([sys.executable, "data/build_shards.py", "--val-docs", "8", "--no-progress"], cwd=root,
                           env=run_env({}), capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=root, capture_output=True, text=True,
                         env=run_env({"PYTHON": sys.executable, "ITERATIONS": "3", "WARMUP_STEPS": "1",
                                      "TRAIN_BATCH_TOKENS": "4096", "TTT_EPOCHS": "1"}), timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("\nrun.sh: done in ") == 1 and "preset: tiny (" in out.stdout
    folders = list((root / "records" / "track_non_record_16mb").glob("*_Tiny_CPU"))
    assert len(folders) == 1 and [path.name for path in folders[0].glob("train_seed*.log")] == ["train_seed1337.log"]
    assert out.stderr.count("check: %s passes" % folders[0].relative_to(root)) == 1, out.stderr[-3000:]


def test_readme_test_command_is_cis_and_lists_skips():
    assert "./test.sh" in readme_commands()[1]
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-1] == 'exec ./test.sh "$@"', ci  # the same command, nothing added
    test_sh = (REPO / "test.sh").read_text()
    assert 'pytest -rs "${xdist[@]}" tests "$@"' in test_sh and "triton==3.7.1" in test_sh
    assert "pytest-xdist==3.8.0" in test_sh


def test_no_doc_repeats_the_641_positions_of_the_eager_rope_table():
    """ROPE_BF16=1 is fp32 positions x bf16-rounded theta, the record's compiled CUDA table."""
    for path in documents():
        assert "641 distinct positions" not in path.read_text(encoding="utf-8"), path


def run_sh_presets() -> dict:
    """run.sh's tiny presets, {recipe: "NAME=VALUE ..."}."""
    run_sh = (REPO / "run.sh").read_text()
    return {label: " ".join(body.split()) for label, body in re.findall(
        r"^\s+(\d{4}-\d\d-\d\d):tiny\)[^\n]*\n(?:\s+#[^\n]*\n)*\s+preset_settings=\((.*?)\) ;;", run_sh, re.M | re.S)}


def test_the_cpu_settings_in_the_docs_are_run_shs_tiny_presets(tgpt):
    """docs/configuration.md lists the settings for running the trainer directly on a CPU: run.sh's presets, one per
    recipe."""
    presets = run_sh_presets()
    docs = " ".join((REPO / "docs" / "configuration.md").read_text().replace("\\\n", " ").split())
    assert set(presets) == set(tgpt.RECIPES)
    for label, settings in presets.items():
        assert settings in docs, (label, settings)


def test_build_shards_help_shows_the_default_vocab_size():
    out = subprocess.run([sys.executable, str(REPO / "data" / "build_shards.py"), "--help"], env=run_env({}),
                         capture_output=True, text=True, timeout=120)
    help_text = " ".join(out.stdout.split())
    assert out.returncode == 0 and "--vocab-size VOCAB_SIZE tokenizer vocab size (default: --tokenizer's, else " \
        "1024)" in help_text


# ---- numbers that describe the code ----------------------------------------------------------------------------

def parameter_count(tgpt, environ: dict) -> int:
    with torch.device("meta"):  # shapes only: the full-size models cost nothing to build
        model = tgpt.build_model(tgpt.Hyperparameters.from_env(environ), torch.device("meta"))
    return sum(param.numel() for param in model.parameters())


def code_values(tgpt) -> dict:
    """What the code says, under the names CODE_FACTS use."""
    tiny = dict(item.split("=", 1) for item in run_sh_presets()["2026-03-23"].split())
    source = (REPO / "train_gpt.py").read_text(encoding="utf-8")
    with torch.device("meta"):
        lanes = tgpt.build_model(tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-27"}), torch.device("meta"))
    defaults = tgpt.Hyperparameters.from_env({})
    return {
        "artifact limit": tgpt.ARTIFACT_LIMIT_BYTES,
        "tiny preset parameters": parameter_count(tgpt, tiny),
        "tiny preset steps": int(tiny["ITERATIONS"]),
        "2026-03-23 parameters": parameter_count(tgpt, {}),
        "2026-04-09 parameters": parameter_count(tgpt, {"RECIPE": "2026-04-09"}),
        "two-lane lambda parameters": sum(param.numel() for name, param in lanes.named_parameters()
                                          if name.startswith(("parallel_resid_lambdas", "parallel_post_lambdas"))),
        "packed wrapper lines": len(tgpt.PACKED_TEMPLATE.format(sha256="0", payload="0").splitlines()),
        "packed code KB": len(tgpt.pack_source(tgpt.strip_source(source))) / 1000,
        "brotli code KB": len(tgpt.brotli.compress(tgpt.strip_source(source).encode("utf-8"), quality=11,
                                                  lgwin=22)) / 1000,
        "readable source KB": len(source.encode("utf-8")) / 1000,
        "README line cap": README_MAX_LINES,
        "layers": defaults.num_layers, "model dim": defaults.model_dim, "query heads": defaults.num_heads,
        "KV heads": defaults.num_kv_heads, "XSA layers": defaults.xsa_last_n, "LeakyReLU slope": tgpt.LEAKY_SLOPE,
    }


# (doc, pattern whose group is the number as written, the code value it states, relative tolerance: 0 = exact; a
# size that drifts with every edit is written rounded, "about N KB", and checked to within its rounding)
CODE_FACTS = [
    ("README.md", r"fits in ([\d,]+) bytes", "artifact limit", 0),
    ("README.md", r"an ([\d]+)-layer GPT", "layers", 0),
    ("README.md", r"\(d=(\d+), \d+ query", "model dim", 0),
    ("README.md", r"(\d+) query / \d+ KV heads", "query heads", 0),
    ("README.md", r"\d+ query / (\d+) KV heads", "KV heads", 0),
    ("README.md", r"XSA on the last (\d+) layers", "XSA layers", 0),
    ("README.md", r"LeakyReLU\(([\d.]+)\)²", "LeakyReLU slope", 0),
    ("README.md", r"model_params:(\d+)", "tiny preset parameters", 0),
    ("README.md", r"model for (\d+) steps with the end-of-run evals", "tiny preset steps", 0),
    ("README.md", r"step:(\d+)/\d+ train_loss", "tiny preset steps", 0),
    ("README.md", r"inside a (\d+)-line ASCII wrapper", "packed wrapper lines", 0),
    ("docs/records.md", r"inside a (\d+)-line ASCII wrapper", "packed wrapper lines", 0),
    ("docs/records.md", r"about (\d+) KB packed", "packed code KB", 0.05),
    ("docs/records.md", r"about (\d+) KB of readable source", "readable source KB", 0.05),
    ("docs/records.md", r"about (\d+) KB of brotli before base85", "brotli code KB", 0.05),
    ("docs/records.md", r"exceeds ([\d,]+) bytes", "artifact limit", 0),
    ("docs/recipe_0409.md", r"packed `train_gpt.py` \(Records\): about (\d+) KB", "packed code KB", 0.05),
    ("docs/recipe_0409.md", r"([\d,]+) parameters\s+\(tested\)", "2026-04-09 parameters", 0),
    ("docs/recipe_0427.md", r"\(\+(\d+) parameters;", "two-lane lambda parameters", 0),
    ("docs/quantization.md", r"into ([\d,]+) bytes", "artifact limit", 0),
    ("docs/tests.md", r"README stays under (\d+) lines", "README line cap", 0),
    ("docs/tests.md", r"the record's parameter count \(([\d,]+)\)", "2026-03-23 parameters", 0),
]
# Numbers of the pattern below that do not describe the code, each with why.
NOT_CODE_SIZES = {
    ("docs/caseops.md", "4 lines"): "the length of a comment's own text",
    ("docs/caseops.md", "0 bytes"): "the byte rule of an operator and of BOS targets (tests/test_data_caseops.py)",
    ("docs/quantization.md", "2 bytes"): "the estimate's cost per histogram entry, a modelling constant",
}
CODE_NUMBER = re.compile(r"(?<![\w.,-])\d[\d,]*(?:[ -](?:lines?|bytes?|B|KB|MB|parameters)\b)|"
                         r"\b(?:model_params|code_bytes):\d+")
# a measurement says when (a date, or a commit: 7+ hex digits with a letter and a digit); a record's fact cites its SPEC
MEASUREMENT = re.compile(r"\b20\d\d-\d\d-\d\d(?!\d)|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b|"
                         r"\bSPEC(?:_\d{4})?(?:\.md)? ?§")
SENTENCE_END = re.compile(r"(?<=[.;])\s+(?=[A-Z(`*])")


def paragraphs(root: Path):
    """(doc, paragraph with its whitespace runs made single spaces) of README and docs/ (not the records' SPECs)."""
    for path in [root / "README.md"] + sorted(p for p in (root / "docs").glob("*.md") if not p.name.startswith("SPEC")):
        for paragraph in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
            yield path.relative_to(root).as_posix(), " ".join(paragraph.split())


def fact_problems(root: Path, values: dict) -> list:
    """CODE_FACTS whose text is missing or states another value than the code's."""
    problems, text = [], {}
    for doc, paragraph in paragraphs(root):
        text.setdefault(doc, []).append(paragraph)
    for doc, pattern, name, tolerance in CODE_FACTS:
        matches = [written for paragraph in text[doc] for written in re.findall(pattern, paragraph)]
        if not matches:
            problems.append(f"{doc}: no text matches {pattern!r} (the {name})")
        for written in matches:
            stated, actual = float(written.replace(",", "")), values[name]
            if abs(stated - actual) > tolerance * abs(actual):
                problems.append(f"{doc}: says {written} for the {name}, the code gives {actual:g}")
    return problems


def unchecked_numbers(root: Path) -> list:
    """Sizes and counts in README and docs/ that no CODE_FACTS entry checks and whose sentence names no date or commit
    (so it is neither computed here nor a dated measurement)."""
    unchecked = []
    for doc, paragraph in paragraphs(root):
        checked = [match.span(1) for d, pattern, _, _ in CODE_FACTS if d == doc
                   for match in re.finditer(pattern, paragraph)]
        starts = [0] + [match.end() for match in SENTENCE_END.finditer(paragraph)] + [len(paragraph)]
        for match in CODE_NUMBER.finditer(paragraph):
            covered = any(low < match.end() and match.start() < high for low, high in checked)
            sentence = next(paragraph[a:b] for a, b in zip(starts, starts[1:]) if a <= match.start() < b)
            if not (covered or MEASUREMENT.search(sentence) or (doc, match.group(0)) in NOT_CODE_SIZES):
                unchecked.append(f"{doc}: {match.group(0)!r} in {sentence[:90]!r}")
    return unchecked


def test_numbers_that_describe_the_code_are_the_codes(tgpt):
    assert fact_problems(REPO, code_values(tgpt)) == []


def test_every_size_or_count_in_the_docs_is_checked_or_a_dated_measurement():
    assert unchecked_numbers(REPO) == []


def test_the_number_checks_see_a_stale_number_and_an_undated_one(tgpt, tmp_path):
    for name in ["README.md", "docs"]:
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy)(REPO / name, tmp_path / name)
    values = code_values(tgpt)
    readme = (tmp_path / "README.md").read_text(encoding="utf-8")
    stale = readme.replace("model_params:%d" % values["tiny preset parameters"], "model_params:778645")
    (tmp_path / "README.md").write_text(stale + "\nThe trainer is 3,712 lines long.\n", encoding="utf-8")
    assert fact_problems(tmp_path, values) == [
        "README.md: says 778645 for the tiny preset parameters, the code gives %d" % values["tiny preset parameters"]]
    assert unchecked_numbers(tmp_path) == ["README.md: '3,712 lines' in 'The trainer is 3,712 lines long.'"]
    (tmp_path / "README.md").write_text(stale + "\nThe trainer was 3,712 lines long at commit 4174a39.\n")
    assert unchecked_numbers(tmp_path) == []
    records = tmp_path / "docs" / "records.md"
    written = re.search(r"about (\d+) KB packed", records.read_text()).group(1)  # within 5% of the code's size
    doubled = records.read_text().replace("about %s KB packed" % written, "about %d KB packed" % (2 * int(written)))
    records.write_text(doubled)
    assert [problem.split(",")[0] for problem in fact_problems(tmp_path, values)][1:] == [
        "docs/records.md: says %d for the packed code KB" % (2 * int(written))]


def recipe_table_cells() -> list:
    """(setting, {recipe: the cell's value for it}) for every setting README's recipe table names with a value."""
    readme = README.read_text(encoding="utf-8")
    table = readme[readme.index("| setting | 2026-03-23 | 2026-04-09 | 2026-04-27 |"):]
    rows = [line.split("|")[1:-1] for line in table[:table.index("\n\n")].splitlines()[2:]]
    recipes, cells = ("2026-03-23", "2026-04-09", "2026-04-27"), []
    for first, *columns in rows:
        names_part, _, aside = first.partition("(")
        names = re.findall(r"`([A-Z0-9_]+)`", names_part)
        for name, value in re.findall(r"`([A-Z0-9_]+)` ([\w.−-]+)", aside):  # "(`LOOP_START` 3, ... in all)"
            cells.append((name, dict.fromkeys(recipes, value)))
        for index, name in enumerate(names):
            row = {}
            for recipe, column in zip(recipes, columns):
                column = column.strip()
                if name == "CONTROL_TENSOR_NAME_PATTERNS":  # its cells describe the lists ("the 03-23 list")
                    continue
                parts = [part.strip(" `") for part in re.sub(r"\s*\(.*\)$", "", column).split(",")]  # no aside
                row[recipe] = parts[0] if len(parts) == 1 else parts[index]
            if row:
                cells.append((name, row))
    return cells


def test_readme_recipe_table_states_every_recipes_values(tgpt):
    """Every cell of README's recipe table, the 2026-03-23 defaults included, is what RECIPE gives that setting."""
    resolved = {recipe: tgpt.Hyperparameters.from_env({"RECIPE": recipe})
                for recipe in ("2026-03-23", "2026-04-09", "2026-04-27")}
    cells, wrong = recipe_table_cells(), []
    assert len(cells) >= 50 and {"ITERATIONS", "DATA_PATH", "LOOP_START", "LQER_GROUP"} <= {n for n, _ in cells}
    for name, row in cells:
        for recipe, written in row.items():
            actual = getattr(resolved[recipe], name.lower())
            written = written.replace("−", "-")
            if written.startswith("…") or isinstance(actual, str) and "/" in actual:  # a path: its last part
                same = actual.endswith(written.lstrip("…"))
            elif isinstance(actual, (bool, int, float)):
                same = float(written) == float(actual)
            else:
                same = written == actual
            if not same:
                wrong.append(f"{name} under {recipe}: README says {written}, the trainer {actual!r}")
    assert wrong == []
