"""Record folders and the tools that build and check them.

`records/<track>/<YYYY-MM-DD>_<Name>/` holds one submission (README.md, submission.json, train_gpt.py,
requirements.txt, train_seed<N>.log per seed, curves.png). `tools/py -m records.make --help` builds and checks such
folders: `parse` (logs -> per-seed results), `make` (logs -> folder) and `check` (folder -> problems, one per line).
`tools/py -m records.pack --help` packs train_gpt.py into its counted form (the folder's train_gpt.py) and back.
"""
