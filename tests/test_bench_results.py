"""bench/ stays a suite: bench/results/ holds only what the docs cite and every bench/results path the docs name
exists; bench/README.md gives every script a command; the docs name only scripts that exist (a removed one by its
git revision, `4174a39:bench/x.py`); at most MAX_SCRIPTS scripts and MAX_LINES lines.

A file is cited by its path (`bench/results/<path>`, `*` allowed), or by its name (or its path below a folder, e.g.
`step_time/*.log`) in a doc that names one of its folders; a folder's README.md cites by name what lies under its
folder once the README itself is cited. The docs: README.md, bench/README.md, bench/NOTES.md, docs/, records'
READMEs, bench/ scripts.
"""
import fnmatch
import re
import shutil

from tgpt_util import REPO

RESULTS = "bench/results/"
EXTENSIONS = "log|txt|csv|json|md|sh|py"
# path tokens: any bench/results/... path, and file names by extension; one preceded by ':' is a git revision path
# (`git show <commit>:bench/results/...`), not a file here
PATH_TOKEN = re.compile(rf"(?<![\w./*:-])(?:{RESULTS}[\w./*-]*|[\w./*-]*[\w*]\.(?:{EXTENSIONS})(?!\w))")


def doc_paths(root):
    names = ["README.md", "bench/README.md", "bench/NOTES.md", "bench/*.py", "bench/*.sh", "docs/*.md",
             "records/**/README.md"]
    return sorted({path for name in names for path in root.glob(name) if path.is_file()})


def citation_problems(root):
    """(paths the docs name under bench/results that do not exist, files under bench/results that nothing cites)."""
    files = sorted(path.relative_to(root).as_posix() for path in (root / RESULTS).rglob("*") if path.is_file())
    cited, missing = set(), []

    def cite(doc, text, home=None):
        """Marks what `text` cites; `home` is the folder of a results README (its names are relative to it)."""
        tokens = [token.rstrip(".") for token in PATH_TOKEN.findall(text)]
        folders = {home} if home else set()
        for token in tokens:
            if token.startswith(RESULTS):
                if token.endswith("/") or (root / token).is_dir():
                    token = token.rstrip("/") + "/"
                    if not (root / token).is_dir():
                        missing.append(f"{doc}: {token}")
                    folders.add(token)
                else:
                    matches = [f for f in files if fnmatch.fnmatchcase(f, token)]
                    if not matches:
                        missing.append(f"{doc}: {token}")
                    cited.update(matches)
                    folders.update(token[:i + 1] for i in range(len(RESULTS), len(token)) if token[i] == "/")
        for token in tokens:
            if token.startswith(RESULTS):
                continue
            matches = [f for f in files for folder in folders if fnmatch.fnmatchcase(f, folder + token)]
            if home and "/" not in token and not token.endswith((".py", ".sh")) and not matches:
                missing.append(f"{doc}: {token} (not in {home})")
            cited.update(matches)

    for path in doc_paths(root):
        cite(path.relative_to(root).as_posix(), path.read_text(encoding="utf-8"))
    done = set()
    while True:  # a results README counts once it is itself cited (it may cite a README below it)
        readmes = [f for f in cited if f.endswith("/README.md") and f not in done]
        if not readmes:
            break
        for readme in readmes:
            done.add(readme)
            cite(readme, (root / readme).read_text(encoding="utf-8"), home=readme[:-len("README.md")])
    return missing, [f for f in files if f not in cited]


def test_docs_cite_only_existing_results_and_every_result_is_cited():
    missing, uncited = citation_problems(REPO)
    assert (missing, uncited) == ([], []), "\n".join(["cited but absent:"] + missing +
                                                      ["in bench/results but cited nowhere:"] + uncited)


def test_the_check_sees_a_broken_citation_and_an_uncited_file(tmp_path):
    for name in ["README.md", "docs", "bench/README.md", "bench/NOTES.md", "bench/results"]:
        source, target = REPO / name, tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
    assert citation_problems(tmp_path) == ([], [])
    cited = "bench/results/cpu2core_gptq_solve.txt"
    docs = [path for path in doc_paths(tmp_path) if cited in path.read_text(encoding="utf-8")]
    assert docs
    for path in docs:  # a typo in every citation of the file
        path.write_text(path.read_text(encoding="utf-8").replace(cited, cited.replace(".txt", "_typo.txt")))
    missing, uncited = citation_problems(tmp_path)
    assert sorted(missing) == sorted(f"{path.relative_to(tmp_path).as_posix()}: {cited[:-4]}_typo.txt"
                                     for path in docs) and uncited == [cited]
    for path in docs:
        path.write_text(path.read_text(encoding="utf-8").replace(cited.replace(".txt", "_typo.txt"), cited))
    (tmp_path / "bench/results/h100_session5/stray.log").write_text("nobody cites this\n")
    (tmp_path / "bench/results/2026-11-26_h100/step_time.txt").unlink()  # named by the folder's README.md
    missing, uncited = citation_problems(tmp_path)
    home = "bench/results/2026-11-26_h100/"
    assert missing == [f"{home}README.md: step_time.txt (not in {home})"]
    assert uncited == ["bench/results/h100_session5/stray.log"]


MAX_SCRIPTS, MAX_LINES = 15, 2500
BENCH_SCRIPT = re.compile(r"(?<![\w:./-])bench/([\w-]+\.(?:py|sh))\b")  # not `4174a39:bench/...` (git history)


def bench_scripts(root=REPO) -> list:
    return sorted(path.name for pattern in ("*.py", "*.sh") for path in (root / "bench").glob(pattern))


def test_bench_readme_gives_every_script_a_command():
    """Each script is run by a command in bench/README.md (the index of the questions it answers)."""
    index = (REPO / "bench" / "README.md").read_text(encoding="utf-8")
    commands = set(re.findall(r"(?:python3|tools/py|bash) bench/([\w-]+\.(?:py|sh))", index))
    assert [name for name in bench_scripts() if name not in commands] == []


def test_the_docs_name_only_scripts_that_exist():
    names = ["README.md", "bench/README.md", "bench/NOTES.md", "docs/*.md", "bench/*.py", "bench/*.sh", "tests/*.py"]
    existing, stale = set(bench_scripts()), []
    for path in sorted({path for name in names for path in REPO.glob(name)}):
        for name in BENCH_SCRIPT.findall(path.read_text(encoding="utf-8")):
            if name not in existing:
                stale.append(f"{path.relative_to(REPO)}: bench/{name}")
    assert stale == []


def test_bench_stays_a_suite_of_few_short_scripts():
    scripts = bench_scripts()
    lines = sum(len((REPO / "bench" / name).read_text(encoding="utf-8").splitlines()) for name in scripts)
    assert len(scripts) <= MAX_SCRIPTS and lines <= MAX_LINES, (len(scripts), lines)
