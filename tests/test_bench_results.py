"""bench/results/ holds only what the docs cite, and every bench/results path the docs name exists.

A file is cited by its path (`bench/results/<path>`, `*` allowed), or by its name (or its path below a folder, e.g.
`step_time/*.log`) in a doc that names one of its folders; a folder's README.md cites by name what lies under its
folder once the README itself is cited. The docs: README.md, bench/NOTES.md, docs/, records' READMEs, bench/ scripts.
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
    names = ["README.md", "bench/NOTES.md", "bench/*.py", "bench/*.sh", "docs/*.md", "records/**/README.md"]
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
    for name in ["README.md", "docs", "bench/NOTES.md", "bench/results"]:
        source, target = REPO / name, tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
    assert citation_problems(tmp_path) == ([], [])
    readme = tmp_path / "docs" / "benchmarks.md"
    text = readme.read_text(encoding="utf-8")
    cited = "bench/results/cpu2core_gptq_solve.txt"
    assert text.count(cited) == 1
    readme.write_text(text.replace(cited, "bench/results/cpu2core_gptq_solve_typo.txt"), encoding="utf-8")
    missing, uncited = citation_problems(tmp_path)
    assert missing == ["docs/benchmarks.md: bench/results/cpu2core_gptq_solve_typo.txt"] and uncited == [cited]
    readme.write_text(text, encoding="utf-8")
    (tmp_path / "bench/results/h100_profile/stray.log").write_text("nobody cites this\n")
    (tmp_path / "bench/results/cpu_compress/synthetic_record.json").unlink()  # named by cpu_compress/README.md
    missing, uncited = citation_problems(tmp_path)
    home = "bench/results/cpu_compress/"
    assert missing == [f"{home}README.md: synthetic_record.json (not in {home})"]
    assert uncited == ["bench/results/h100_profile/stray.log"]
