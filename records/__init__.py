"""Record folders and the tool that builds and checks them.

`records/<track>/<YYYY-MM-DD>_<Name>/` holds one submission (README.md, submission.json, train_gpt.py,
train_seed<N>.log per seed, curves.png). `python3 -m records.make --help` builds and checks such folders:
`parse` (logs -> per-seed results), `make` (logs -> folder) and `check` (folder -> problems, one per line).
"""
