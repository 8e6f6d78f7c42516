"""run.sh's RESUME: the checkpoint a resume continues and the settings of the run that wrote it.

    python tools/resume_settings.py        (reads RESUME and RUN_ID from the environment)

RESUME=latest takes RUN_ID's newest checkpoint logs/<RUN_ID>/checkpoints/step_<N>; RESUME=<folder> that folder
(and its run's RUN_ID when RUN_ID is unset). Prints the run's RUN_ID, the checkpoint folder, then one NAME=value line
per setting of that run that differs from its recipe's defaults (RECIPE included), read from the checkpoint's
manifest.json: the settings run.sh exports again, so that a resumed run trains as the first slice did, whatever
preset or environment that slice had. Where the checkpoint is missing or unreadable it prints instead one line
saying why and exits 2; the trainer itself checks everything again (files, settings, world size) when it loads it.
"""
import json
import os
import re
import sys
from dataclasses import fields
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOT_REPEATED = ("run_id", "resume")  # RUN_ID is printed on its own line; RESUME is the caller's


def checkpoint_folder(resume: str, run_id: str) -> Path:
    if resume != "latest":
        return Path(resume)
    if not run_id:
        raise ValueError("RESUME=latest continues the run named by RUN_ID: set RUN_ID")
    root = Path("logs") / run_id / "checkpoints"
    steps = sorted(int(path.name[5:]) for path in root.glob("step_*") if re.fullmatch(r"step_\d+", path.name))
    if not steps:
        raise ValueError("RESUME=latest: no checkpoint in %s (CHECKPOINT_EVERY or CHECKPOINT_ON_SIGNAL=1 writes them)"
                         % root)
    return root / ("step_%d" % steps[-1])


def env_value(value) -> str:
    return ("1" if value else "0") if isinstance(value, bool) else repr(value) if isinstance(value, float) else str(value)


def run_settings(config: dict, trainer) -> list:
    """NAME=value for each setting of `config` that differs from the defaults of its recipe."""
    defaults = {f.name: f.default for f in fields(trainer.Hyperparameters)}
    defaults.update(trainer.RECIPES.get(config.get("recipe"), {}))
    settings = ["RECIPE=%s" % config["recipe"]] if config.get("recipe", "2026-03-23") != "2026-03-23" else []
    for name in sorted(config):
        if name not in NOT_REPEATED + ("recipe",) and name in defaults and config[name] != defaults[name]:
            settings.append("%s=%s" % (name.upper(), env_value(config[name])))
    return settings


def main() -> int:
    resume, run_id = os.environ.get("RESUME", ""), os.environ.get("RUN_ID", "")
    try:
        folder = checkpoint_folder(resume, run_id)
        manifest_path = folder / "manifest.json"
        try:
            config = json.loads(manifest_path.read_text(encoding="utf-8"))["config"]
            saved_run = config["run_id"]
        except (OSError, ValueError, LookupError, TypeError) as exc:
            raise ValueError("RESUME=%s: not a complete checkpoint folder (%s has no readable config: %s)"
                             % (resume, manifest_path, exc)) from None
        if run_id and run_id != saved_run:
            raise ValueError("RESUME=%s is run %s's checkpoint, not RUN_ID=%s's" % (resume, saved_run, run_id))
    except ValueError as exc:
        print(str(exc))
        return 2
    sys.path.insert(0, str(REPO))
    import train_gpt  # the defaults the checkpoint's settings are compared with

    print(saved_run)
    print(folder)
    for line in run_settings(config, train_gpt):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
