"""README and docs/ stay true: every `NAME=` they mention is a setting of the trainer or a variable named
below, every relative link resolves (to a file, and to a heading where it names one), README stays a README (at
most 250 lines, linking every docs page), its commands work after the quick start, and what it says about the test
command, the CPU settings and the records example is what the repository does."""
import re
import subprocess
import sys
from pathlib import Path

from tgpt_util import REPO, run_env, tgpt  # noqa: F401 (fixture)

README = REPO / "README.md"
# The record specs describe other scripts (their own variables, e.g. the 04-27 record's CASEOPS_ENABLED).
DOCS = sorted(path for path in (REPO / "docs").glob("*.md") if not path.name.startswith("SPEC"))
# Variables that are not trainer settings, each read by something the docs describe.
EXTERNAL = {
    "PRESET", "NPROC", "PYTHON", "TORCH_SPEC",  # run.sh and tools/python_env.sh
    "REQUIRE_TRITON_TESTS",  # tests: a missing triton fails instead of skipping
    "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "TRITON_INTERPRET",  # CUDA, OpenMP, Triton
    "MATCHED_FINEWEB_REPO_ID", "MATCHED_FINEWEB_REMOTE_ROOT_PREFIX", "DATA_DIR",  # data/cached_challenge_fineweb.py
    "PARTS",  # bench/recipe_0409_gpu.sh
    "LATE_QAT",  # the 2026-03-23 record's published command: read by nothing, logged as IGNORED (differences.md)
}


def documents():
    return [README] + DOCS


def test_readme_is_a_readme_and_links_every_docs_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
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
    """`torchrun` is not on PATH after the quick start (README's `torchrun ...` exited 127); the records example
    named a track folder that the repository does not have."""
    commands = readme_commands()
    assert not [line for line in commands if line.startswith("torchrun") or " torchrun " in line], commands
    assert any("tools/py -m torch.distributed.run --standalone --nproc_per_node=8 train_gpt.py" in line
               for line in commands)
    tracks = re.findall(r"records/(track_[^/\s]+)(?:/([^\s<]+))?", "\n".join(commands))
    assert tracks
    for track, folder in tracks:
        if folder:  # a folder of records.make's own output (<date>_<Name>) is not required to exist
            assert (REPO / "records" / track / folder).is_dir(), (track, folder)
    assert any((REPO / "records" / track).is_dir() for track, _ in tracks)


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


def test_the_cpu_settings_in_the_docs_are_run_shs_tiny_presets():
    """docs/configuration.md lists the settings for running the trainer directly on a CPU: run.sh's presets."""
    run_sh = (REPO / "run.sh").read_text()
    presets = {label: " ".join(body.split()) for label, body in
               re.findall(r"^\s+(1tiny|\*tiny)\)[^\n]*\n\s+preset_settings=\((.*?)\) ;;", run_sh, re.M | re.S)}
    docs = " ".join((REPO / "docs" / "configuration.md").read_text().replace("\\\n", " ").split())
    assert set(presets) == {"1tiny", "*tiny"}
    for label, settings in presets.items():
        assert settings in docs, (label, settings)


def test_build_shards_help_shows_the_default_vocab_size():
    out = subprocess.run([sys.executable, str(REPO / "data" / "build_shards.py"), "--help"], env=run_env({}),
                         capture_output=True, text=True, timeout=120)
    help_text = " ".join(out.stdout.split())
    assert out.returncode == 0 and "--vocab-size VOCAB_SIZE tokenizer vocab size (default 1024)" in help_text
