"""torchrun entry point for the rank-failure test: the rank named by FAULT_RANK reads FAULT_DATA_PATH instead of
DATA_PATH (a copy of the dataset with a corrupt shard), then runs train_gpt.py unchanged."""
import os
import runpy
import sys
from pathlib import Path

if os.environ.get("RANK") == os.environ.get("FAULT_RANK"):
    os.environ["DATA_PATH"] = os.environ["FAULT_DATA_PATH"]
script = str(Path(__file__).resolve().parents[2] / "train_gpt.py")
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
