#!/usr/bin/env bash
# RECIPE=2026-04-27 on one H200: its attention kernels alone on the loader's packed rows (bench/step_time.py
# attention) and where a training step's GPU time goes, before and after looping (bench/step_time.py profile: 3 steps
# of 786,432 tokens = 8 micro-steps of 98,304). Data: .carry/wiki_caseops_small (the bundled corpus's CaseOps
# shards, the first 4.0 M train tokens). Also carries the first half of FlashAttention-4's runtime (.fa4a/) for
# kernels_call2.sh, which must follow within the machine's 30 s idle release.
set -u
stamp() { python3 -u .carry/stamp.py; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch; print(torch.__version__)"; nproc; date -u; } > $OUT/host.txt
export RECIPE=2026-04-27 DATA_PATH=.carry/wiki_caseops_small TOKENIZER_PATH=.carry/caseops8192.model
timeout -k 5 150 python3 bench/step_time.py attention 2>&1 | stamp > $OUT/attention.txt
tail -12 $OUT/attention.txt
timeout -k 5 ${PROFILE_LIMIT:-390} python3 bench/step_time.py profile --steps 3 --top 45 2>&1 | stamp > $OUT/profile_0427.txt
grep -E "warmup|step wall|profiled|^ *[0-9.]+ [a-z]|looping" $OUT/profile_0427.txt | head -40
mkdir -p /tmp/fa4parts && cp .fa4a/part_aa /tmp/fa4parts/  # an ignored folder not named in the next call's carry is gone there; /tmp stays
