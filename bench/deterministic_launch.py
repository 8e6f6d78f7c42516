"""Run train_gpt.py with PyTorch's deterministic algorithms on, for bit-identity checks of the data path:
with them off, GPU backward kernels that use atomics make two identical runs differ after a few steps.

  torchrun --standalone --nproc_per_node=1 bench/deterministic_launch.py      (same env as train_gpt.py)
"""
import os
import runpy
import sys
from pathlib import Path

import torch

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # required by cuBLAS for deterministic GEMMs
torch.use_deterministic_algorithms(True)
script = str(Path(__file__).resolve().parents[1] / "train_gpt.py")
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
